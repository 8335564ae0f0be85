"""One broker per data dir: an exclusive lock on ``<data-dir>/.lock``, held while the broker runs.

Two brokers on one data dir would append to the same segment files with offsets of their own and
corrupt every log, so, as Kafka locks each log dir, the second one refuses to start. The lock is an
``flock`` on an open file: the kernel drops it when the process ends however it ends (kill -9
included), so a crashed broker never leaves a stale lock behind. Another ``Broker`` in the same
process is refused too (each open of the file is its own lock holder). The file also names the holder's
pid, for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirError(Exception):
    """The data dir cannot be used; the message says why (``onceflow serve`` prints it as it is)."""


class DataDirInUse(DataDirError):
    """Another broker holds the data dir."""


class DataDirUnusable(DataDirError):
    """The data dir cannot be created or opened (a file in the way, a read-only place, ...)."""


class DataDirLock:
    """Held from :func:`lock_data_dir` until :meth:`release` (or the process ends)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the lock
            self._fd = None


def lock_data_dir(data_dir: Path) -> DataDirLock:
    """Create ``data_dir`` if needed and lock it; raises :class:`DataDirInUse` if another broker has it."""
    path = data_dir / LOCK_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DataDirUnusable(f"cannot use {data_dir} as the data dir: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise DataDirInUse(
            f"data dir {data_dir} is in use by another onceflow broker"
            + (f" (pid {holder})" if holder.isdigit() else "")
            + ": two brokers on one data dir would corrupt its logs"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return DataDirLock(path, fd)
