"""Producer-state snapshot files: ``<offset:020d>.snapshot`` in the partition directory.

A snapshot at offset N holds the state of every producer after all batches below offset N; recovery
loads the newest valid one and replays only the log from N on (``ProducerStateManager.load_latest``).
The bytes (versioned, CRC32C-checked, fixed-size rows sorted by producer id) are described in
``producer_snapshot_format``; this module names, lists, writes and deletes the files.

Unlike Kafka, which keeps only each producer's last batch in the snapshot, we store all (up to 5)
cached batches. Kafka rebuilds the rest of the window by replaying the log after the snapshot, which
only works when the snapshot is older than the cached batches; after a clean shutdown the snapshot is
at the log end and a restarted Kafka broker would take a resend of the 2nd..5th newest batch for an
out-of-order sequence. Keeping the whole window means a restart never forgets a duplicate the broker
would have caught before it.

Files are written with :func:`~onceflow.log.durable_file.write_atomically` (temp file, fsync, rename,
fsync of the directory): a crash leaves either
the old set of snapshots or the new one, never a half-written ``.snapshot``. A file that fails any
check raises :class:`CorruptSnapshot`; the manager deletes it and falls back to an older snapshot.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from onceflow.log.durable_file import TEMP_SUFFIX as _TEMP
from onceflow.log.durable_file import write_atomically
from onceflow.log.producer_entry import ProducerStateEntry
from onceflow.log.producer_snapshot_format import (
    SNAPSHOT_VERSION,
    CorruptSnapshot,
    SnapshotRows,
    decode_snapshot,
    encode_snapshot,
    parse_snapshot,
)

__all__ = [
    "SNAPSHOT_VERSION",
    "CorruptSnapshot",
    "SnapshotFile",
    "SnapshotRows",
    "decode_snapshot",
    "delete_snapshot",
    "delete_snapshots_after",
    "delete_snapshots_before",
    "delete_snapshots_inside_segment",
    "encode_snapshot",
    "list_snapshots",
    "read_snapshot",
    "read_snapshot_rows",
    "remove_temp_files",
    "snapshot_path",
    "write_snapshot",
    "write_snapshot_bytes",
]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
TEMP_SUFFIX = SNAPSHOT_SUFFIX + _TEMP  # what write_atomically leaves if interrupted

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    offset: int
    path: Path


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[SnapshotFile]:
    """The snapshot files in ``directory``, oldest first (temp files and other names are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _SNAPSHOT_NAME.match(path.name)
        if match:
            found.append(SnapshotFile(int(match.group(1)), path))
    found.sort(key=lambda snapshot: snapshot.offset)
    return found


def _read_bytes(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CorruptSnapshot(f"{path}: cannot read producer snapshot: {exc}") from exc


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Every entry stored in the snapshot file at ``path``; ``CorruptSnapshot`` if it is damaged."""
    return decode_snapshot(_read_bytes(path), source=str(path))


def read_snapshot_rows(path: Path) -> SnapshotRows:
    """The snapshot at ``path`` checked (version, CRC, size) but not decoded: what recovery loads."""
    return parse_snapshot(_read_bytes(path), source=str(path))


def write_snapshot(directory: Path, offset: int, entries: Iterable[ProducerStateEntry]) -> Path:
    """Write a snapshot of ``entries`` at ``offset`` atomically and durably; returns its path."""
    return write_snapshot_bytes(directory, offset, encode_snapshot(entries))


def write_snapshot_bytes(directory: Path, offset: int, data: bytes) -> Path:
    """Write encoded snapshot bytes as the snapshot at ``offset``, atomically and durably."""
    directory = Path(directory)
    final = snapshot_path(directory, offset)
    write_atomically(final, data)  # its temp file is <offset>.snapshot.tmp (TEMP_SUFFIX)
    log.debug("wrote producer snapshot %s (%d bytes)", final, len(data))
    return final


def delete_snapshot(path: Path) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass


def delete_snapshots_after(directory: Path, offset: int) -> list[int]:
    """Delete snapshots at offsets above ``offset`` (after the log was truncated to it)."""
    deleted = [s.offset for s in list_snapshots(directory) if s.offset > offset]
    for snapshot_offset in deleted:
        delete_snapshot(snapshot_path(directory, snapshot_offset))
    return deleted


def delete_snapshots_before(directory: Path, offset: int, *, keep_latest: int = 2) -> list[int]:
    """Delete snapshots at offsets below ``offset``, but never the newest ``keep_latest`` ones.

    Keeping a couple means a corrupt newest snapshot still has an older one to fall back to.
    """
    snapshots = list_snapshots(directory)
    protected = {s.offset for s in snapshots[-keep_latest:]} if keep_latest > 0 else set()
    deleted = [s.offset for s in snapshots if s.offset < offset and s.offset not in protected]
    for snapshot_offset in deleted:
        delete_snapshot(snapshot_path(directory, snapshot_offset))
    return deleted


def delete_snapshots_inside_segment(directory: Path, segment_base: int, *, keep_latest: int = 2) -> list[int]:
    """Delete periodic snapshots above ``segment_base`` (the active segment's), but the newest ``keep_latest``.

    The snapshot *at* a segment's base offset (its roll snapshot) is kept: it bounds the replay after a
    truncation into that segment.
    """
    inside = [s for s in list_snapshots(directory) if s.offset > segment_base]
    doomed = inside[:-keep_latest] if keep_latest > 0 else inside
    for snapshot in doomed:
        delete_snapshot(snapshot.path)
    return [snapshot.offset for snapshot in doomed]


def remove_temp_files(directory: Path) -> None:
    """Delete half-written snapshots left by a crash during write_snapshot."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.name.endswith(TEMP_SUFFIX):
            log.info("deleting unfinished producer snapshot %s", path)
            delete_snapshot(path)
