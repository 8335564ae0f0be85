"""Producer-state snapshot files: ``<offset:020d>.snapshot`` in the partition directory.

A snapshot at offset N holds the state of every producer after all batches below offset N; recovery
loads the newest valid one and replays only the log from N on (``ProducerStateManager.load_latest``).

Format (big-endian, our own, versioned; Kafka's layout idea: version, then a CRC over the rest)::

    int16  version            (1)
    uint32 crc32c             over every byte after this field
    int32  producer count
    per producer:
        int64 producer_id, int16 epoch, int32 coordinator_epoch, int64 last_timestamp,
        int64 current_txn_first_offset (-1: no open transaction),
        int8  batch count (0..5), then per batch, oldest first:
            int32 first_seq, int32 last_seq, int64 first_offset, int64 last_offset, int64 timestamp

Unlike Kafka, which keeps only each producer's last batch in the snapshot, we store all (up to 5)
cached batches. Kafka rebuilds the rest of the window by replaying the log after the snapshot, which
only works when the snapshot is older than the cached batches; after a clean shutdown the snapshot is
at the log end and a restarted Kafka broker would take a resend of the 2nd..5th newest batch for an
out-of-order sequence. Keeping the whole window means a restart never forgets a duplicate the broker
would have caught before it.

Files are written atomically (temp file, fsync, rename, fsync of the directory): a crash leaves either
the old set of snapshots or the new one, never a half-written ``.snapshot``. A file that fails any
check raises :class:`CorruptSnapshot`; the manager deletes it and falls back to an older snapshot.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from onceflow.log.producer_entry import NUM_BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
TEMP_SUFFIX = ".snapshot.tmp"
SNAPSHOT_VERSION = 1

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_HEADER_SIZE = _VERSION.size + _CRC.size


class CorruptSnapshot(KafkaError):
    """A snapshot file that is truncated, has a bad CRC or an unknown version.

    Never sent to a client: the manager deletes the file and uses an older snapshot. Its code is
    KAFKA_STORAGE_ERROR in case one escapes.
    """

    code = ErrorCode.KAFKA_STORAGE_ERROR


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


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    entries = list(entries)
    body = bytearray(_COUNT.pack(len(entries)))
    for entry in entries:
        batches = entry.batches[-NUM_BATCHES_TO_RETAIN:]
        txn_first_offset = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
        body += _ENTRY.pack(
            entry.producer_id,
            entry.epoch,
            entry.coordinator_epoch,
            entry.last_timestamp,
            txn_first_offset,
            len(batches),
        )
        for batch in batches:
            body += _BATCH.pack(
                batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset, batch.timestamp
            )
    return _VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes, *, source: str = "snapshot") -> list[ProducerStateEntry]:
    """Parse a snapshot's bytes; ``CorruptSnapshot`` (naming ``source``) if anything is off."""
    if len(data) < _HEADER_SIZE + _COUNT.size:
        raise CorruptSnapshot(f"{source}: {len(data)} bytes is too short for a producer snapshot")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"{source}: snapshot version {version}, expected {SNAPSHOT_VERSION}")
    (stored_crc,) = _CRC.unpack_from(data, _VERSION.size)
    body = memoryview(data)[_HEADER_SIZE:]
    computed_crc = crc32c.crc32c(body)
    if stored_crc != computed_crc:
        raise CorruptSnapshot(
            f"{source}: CRC32C {computed_crc:#010x} does not match stored {stored_crc:#010x}"
        )
    try:
        return _decode_entries(body)
    except struct.error as exc:
        raise CorruptSnapshot(f"{source}: truncated producer snapshot ({exc})") from exc


def _decode_entries(body: memoryview) -> list[ProducerStateEntry]:
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0:
        raise CorruptSnapshot(f"negative producer count {count}")
    pos = _COUNT.size
    entries = []
    for _ in range(count):
        pid, epoch, coordinator_epoch, last_timestamp, txn_first_offset, batch_count = _ENTRY.unpack_from(
            body, pos
        )
        pos += _ENTRY.size
        if not 0 <= batch_count <= NUM_BATCHES_TO_RETAIN:
            raise CorruptSnapshot(
                f"producer {pid} has {batch_count} batches, at most {NUM_BATCHES_TO_RETAIN}"
            )
        batches = []
        for _ in range(batch_count):
            batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
            pos += _BATCH.size
        entries.append(
            ProducerStateEntry(
                producer_id=pid,
                epoch=epoch,
                batches=tuple(batches),
                coordinator_epoch=coordinator_epoch,
                last_timestamp=last_timestamp,
                current_txn_first_offset=None if txn_first_offset < 0 else txn_first_offset,
            )
        )
    if pos != len(body):
        raise CorruptSnapshot(f"{len(body) - pos} bytes after the last producer entry")
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """The entries stored in the snapshot file at ``path``; ``CorruptSnapshot`` if it is damaged."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptSnapshot(f"{path}: cannot read producer snapshot: {exc}") from exc
    try:
        return decode_snapshot(data, source=str(path))
    except CorruptSnapshot as exc:
        if str(path) in str(exc):
            raise
        raise CorruptSnapshot(f"{path}: {exc}") from exc


def write_snapshot(directory: Path, offset: int, entries: Iterable[ProducerStateEntry]) -> Path:
    """Write the snapshot at ``offset`` atomically and durably; returns its path."""
    directory = Path(directory)
    final = snapshot_path(directory, offset)
    temp = directory / f"{offset:020d}{TEMP_SUFFIX}"
    data = encode_snapshot(entries)
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, final)
    fsync_directory(directory)
    log.debug("wrote producer snapshot %s (%d bytes)", final, len(data))
    return final


def fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def remove_temp_files(directory: Path) -> None:
    """Delete half-written snapshots left by a crash during write_snapshot."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.name.endswith(TEMP_SUFFIX):
            log.info("deleting unfinished producer snapshot %s", path)
            delete_snapshot(path)
