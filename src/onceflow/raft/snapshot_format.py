"""What a snapshot holds, and how its bytes are laid out (KIP-630).

A snapshot is the listener's state at an offset, as records: the bytes are magic-2 record batches,
a control batch with a SnapshotHeaderRecord first, the listener's records in data batches, and a
control batch with a SnapshotFooterRecord last, all stamped with the snapshot's epoch (Kafka's
layout). The footer is how a reader knows the snapshot is whole. The same bytes are the file
``<offset:020d>-<epoch:010d>.checkpoint`` and what FetchSnapshot sends in chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.record_codec import decode_record_objects, split_batches
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter
from onceflow.raft import batch_codec
from onceflow.raft.errors import SnapshotError
from onceflow.raft.records import Batch, OffsetAndEpoch

# Records per data batch of a snapshot (Kafka caps its batches by bytes; a count keeps ours small).
RECORDS_PER_BATCH = 1000


def encode_snapshot(snapshot_id: OffsetAndEpoch, records: Iterable[bytes], timestamp_ms: int) -> bytes:
    """The bytes of a snapshot at ``snapshot_id`` holding ``records`` in order."""
    epoch = snapshot_id.epoch
    w = SchemaWriter(flexible=True)
    w.int16(0)
    w.int64(timestamp_ms)  # LastContainedLogTimestamp
    w.tagged_fields([])
    parts = [
        batch_codec.encode_control(
            batch_codec.SNAPSHOT_HEADER, w.done(), base_offset=0, epoch=epoch, timestamp_ms=timestamp_ms
        )
    ]
    offset = 1
    pending: list[bytes] = []

    def flush() -> None:
        nonlocal offset
        if pending:
            parts.append(batch_codec.encode(Batch(offset, epoch, timestamp_ms, tuple(pending))))
            offset += len(pending)
            pending.clear()

    for record in records:
        if not isinstance(record, bytes | bytearray | memoryview):
            raise TypeError(f"snapshot records must be bytes, got {type(record).__name__}")
        pending.append(bytes(record))
        if len(pending) >= RECORDS_PER_BATCH:
            flush()
    flush()
    footer = SchemaWriter(flexible=True)
    footer.int16(0)
    footer.tagged_fields([])
    parts.append(
        batch_codec.encode_control(
            batch_codec.SNAPSHOT_FOOTER,
            footer.done(),
            base_offset=offset,
            epoch=epoch,
            timestamp_ms=timestamp_ms,
        )
    )
    return b"".join(parts)


@dataclass(frozen=True)
class Snapshot:
    """A stored snapshot as the listener's ``handle_load_snapshot`` receives it: ``offset`` and
    ``epoch`` name it (everything below ``offset`` is in it), ``records`` reads its records in order."""

    offset: int
    epoch: int
    data: bytes
    last_contained_timestamp_ms: int

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.offset, self.epoch)

    @property
    def records(self) -> Iterator[bytes]:
        return iter_records(self.data)


def open_snapshot(snapshot_id: OffsetAndEpoch, data: bytes) -> Snapshot:
    """Check ``data`` is a whole snapshot (header first, footer last, every batch's CRC) and wrap it.
    Raises ``SnapshotError`` naming what is wrong."""
    try:
        batches = list(split_batches(data, check_crc=True))
        size = sum(header.size for header, _ in batches)
        if not batches or size != len(data):
            raise CorruptMessage(f"{len(data) - size} trailing bytes are not a whole batch")
        first_type, first_value = _control(*batches[0])
        last_type, _ = _control(*batches[-1])
        if first_type != batch_codec.SNAPSHOT_HEADER or last_type != batch_codec.SNAPSHOT_FOOTER:
            raise CorruptMessage("it does not start with a header record and end with a footer record")
        reader = SchemaReader(first_value, "SnapshotHeaderRecord", flexible=True)
        reader.int16()
        timestamp = reader.int64()
    except CorruptMessage as exc:
        raise SnapshotError(f"snapshot {snapshot_id.offset}-{snapshot_id.epoch} is damaged: {exc}") from exc
    return Snapshot(snapshot_id.offset, snapshot_id.epoch, data, timestamp)


def iter_records(data: bytes) -> Iterator[bytes]:
    for header, view in split_batches(data, check_crc=False):
        if header.is_control:
            continue
        for record in decode_record_objects(header, view):
            yield b"" if record.value is None else bytes(record.value)


def _control(header, view) -> tuple[int, bytes]:
    if not header.is_control:
        return -1, b""
    return batch_codec.control_record(header.base_offset, decode_record_objects(header, view))


class SnapshotWriter:
    """Collects a listener's records for a snapshot at ``snapshot_id``; ``freeze`` stores it (through
    ``store``, which makes it durable) and returns its id. A writer that is never frozen stores nothing."""

    def __init__(
        self,
        snapshot_id: OffsetAndEpoch,
        timestamp_ms: int,
        store: Callable[[OffsetAndEpoch, bytes], None],
    ) -> None:
        self.snapshot_id = snapshot_id
        self._timestamp_ms = timestamp_ms
        self._store = store
        self._records: list[bytes] = []
        self._frozen = False

    def append(self, records: Iterable[bytes]) -> None:
        if self._frozen:
            raise SnapshotError(f"snapshot {self.snapshot_id} is frozen already")
        self._records.extend(records)

    def freeze(self) -> OffsetAndEpoch:
        if self._frozen:
            raise SnapshotError(f"snapshot {self.snapshot_id} is frozen already")
        self._frozen = True
        self._store(self.snapshot_id, encode_snapshot(self.snapshot_id, self._records, self._timestamp_ms))
        self._records = []
        return self.snapshot_id
