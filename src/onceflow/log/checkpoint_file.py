"""Kafka's small text checkpoint files: a version line, an entry count line, then one entry per line.

Two files of the replication protocol use it, with Kafka's names so that an operator recognises them:
``leader-epoch-checkpoint`` in each partition directory (``epoch start_offset`` lines) and
``replication-offset-checkpoint`` in each data directory (``topic partition offset`` lines, the high
watermarks). Kafka's format, version 0 for both::

    0
    2
    0 0
    3 1045

A file is replaced whole (temp file, rename): readers see the old contents or the new. ``durable``
also fsyncs the file and the directory. A file that does not parse raises :class:`CorruptCheckpoint`
naming the line; its owner decides what to fall back on (nothing is silently read as empty).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

TEMP_SUFFIX = ".tmp"


class CorruptCheckpoint(Exception):
    """A checkpoint file that cannot be read: wrong version, a malformed line, a wrong count."""


def read_checkpoint(path: Path, version: int, parse: Callable[[list[str]], T]) -> list[T] | None:
    """The entries of the checkpoint at ``path`` (``parse`` gets each line's whitespace-separated
    fields and raises ValueError on a bad one), or None when there is no file. An empty file (Kafka
    creates one before the first write) has no entries."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptCheckpoint(f"{path}: cannot read: {exc}") from exc
    lines = text.splitlines()
    if not lines:
        return []
    if _int(path, lines[0]) != version:
        raise CorruptCheckpoint(f"{path}: version {lines[0]!r}, expected {version}")
    if len(lines) < 2:
        return []
    expected = _int(path, lines[1])
    entries = []
    for line in lines[2:]:
        try:
            entries.append(parse(line.split()))
        except (ValueError, IndexError) as exc:
            raise CorruptCheckpoint(f"{path}: malformed line {line!r}") from exc
    if len(entries) != expected:
        raise CorruptCheckpoint(f"{path}: {len(entries)} entries, but the count line says {expected}")
    return entries


def write_checkpoint(path: Path, version: int, lines: Iterable[str], *, durable: bool = True) -> None:
    """Replace the checkpoint at ``path`` with ``lines`` (one entry each)."""
    path = Path(path)
    body = list(lines)
    text = "".join(f"{line}\n" for line in [str(version), str(len(body)), *body])
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _int(path: Path, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise CorruptCheckpoint(f"{path}: malformed line {text!r}") from None
