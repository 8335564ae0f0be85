"""Replacing a small file so that a crash leaves the old contents or the new, never a mix.

Every file the broker rewrites whole goes through :func:`write_atomically`: the segment indexes,
producer snapshots, ``log-start-offset``, the cleaner's swap list and checkpoint, ``topics.json``,
``meta.properties``, the producer-id block, and the metadata quorum's state file and snapshots. The
sequence is: write ``<name>.tmp``, fsync it, rename it over ``<name>``, fsync the directory (the
rename is only durable once the directory is).
With ``durable=False`` both fsyncs are skipped: a crash still leaves a whole file (the rename is
atomic) but maybe the old one, for files whose loss costs only work (the cleaner's checkpoint, indexes
written at roll, which a later flush writes durably). A leftover ``.tmp`` is never read back; each
owner removes those it finds when it opens its directory.
"""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_path(path: Path, suffix: str = TEMP_SUFFIX) -> Path:
    """Where :func:`write_atomically` writes before the rename."""
    return path.with_name(path.name + suffix)


def write_atomically(
    path: Path,
    data: bytes | str,
    *,
    durable: bool = True,
    temp_suffix: str = TEMP_SUFFIX,
    mode: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8). ``temp_suffix``: the temp file's
    suffix, for owners whose leftovers are known by another name (the quorum's ``.part`` snapshots).
    ``mode``: permissions set on the temp file before a byte is written, for secrets (a chmod after
    the rename would leave them readable for a moment, and a leftover temp keeps its old mode)."""
    path = Path(path)
    temp = temp_path(path, temp_suffix)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    if durable:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
