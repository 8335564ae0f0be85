"""The bytes of a producer snapshot, and a lazy view over them that loads in O(1).

Why a lazy view: a restart must not cost one Python object per producer. With 100,000 producer ids
the version-1 decoder spent ~1 s building entries the broker mostly never touches again. Version 2
stores fixed-size rows sorted by producer id, so the file can be checked (CRC32C over everything) and
then used as it is: a lookup is a binary search over the rows, an entry is built the first time its
producer appends, and a new snapshot copies the rows nobody touched byte for byte.

Version 2 layout (big-endian)::

    int16  version               (2)
    uint32 crc32c                over every byte after this field
    int32  producer count
    int8   batch slots per row   (0..5: the most batches any producer in the file has)
    int32  open transaction count, then per open transaction (by producer id):
        int64 producer_id, int64 first_offset
    per producer, by producer id (strictly increasing), one fixed-size row:
        int64 producer_id, int16 epoch, int32 coordinator_epoch, int64 last_timestamp,
        int64 current_txn_first_offset (-1: no open transaction), int8 batch count,
        then ``slots`` batch slots, oldest first, unused ones zero:
            int32 first_seq, int32 last_seq, int64 first_offset, int64 last_offset, int64 timestamp

The open-transaction section repeats what the rows say, so that loading needs no scan of the rows
(the manager needs every open transaction at once: they bound the last stable offset).

Version 1 (variable-size entries in file order, see ``_decode_v1``) is still read: it is converted to
version 2 in memory, and the next snapshot is written as version 2.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable, Mapping

import crc32c

from onceflow.log.producer_entry import NUM_BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry
from onceflow.protocol.errors import ErrorCode, KafkaError

SNAPSHOT_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)

_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_HEADER_SIZE = _VERSION.size + _CRC.size
_COUNTS = struct.Struct(">ib")  # producer count, batch slots per row
_TXN_COUNT = struct.Struct(">i")
_TXN = struct.Struct(">qq")
_ROW_HEAD = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")
_PID = struct.Struct(">q")
_ZERO_SLOT = bytes(_BATCH.size)


class CorruptSnapshot(KafkaError):
    """A snapshot file that is truncated, has a bad CRC or an unknown version.

    Never sent to a client: the manager deletes the file and uses an older snapshot. Its code is
    KAFKA_STORAGE_ERROR in case one escapes.
    """

    code = ErrorCode.KAFKA_STORAGE_ERROR


def row_size(slots: int) -> int:
    return _ROW_HEAD.size + slots * _BATCH.size


class SnapshotRows:
    """The producers of one (CRC-checked) version-2 snapshot, decoded only on demand.

    Rows are addressed by index (0 .. len-1, in producer-id order); the manager remembers which rows
    it has taken over so that a row is never used twice.
    """

    __slots__ = ("_data", "_rows_at", "_count", "slots", "_row_size", "open_transactions", "_pids")

    def __init__(self, data: bytes | memoryview, *, source: str = "snapshot") -> None:
        data = memoryview(data)
        try:
            count, slots = _COUNTS.unpack_from(data, _HEADER_SIZE)
            pos = _HEADER_SIZE + _COUNTS.size
            (txn_count,) = _TXN_COUNT.unpack_from(data, pos)
            pos += _TXN_COUNT.size
            if count < 0 or txn_count < 0 or not 0 <= slots <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshot(
                    f"{source}: impossible counts (producers {count}, transactions {txn_count}, "
                    f"batch slots {slots})"
                )
            #: ``(producer_id, first_offset)`` of every open transaction in the file
            self.open_transactions: list[tuple[int, int]] = list(
                _TXN.iter_unpack(data[pos : pos + txn_count * _TXN.size])
            )
        except struct.error as exc:
            raise CorruptSnapshot(f"{source}: truncated producer snapshot ({exc})") from exc
        pos += txn_count * _TXN.size
        self._row_size = row_size(slots)
        if len(data) != pos + count * self._row_size:
            raise CorruptSnapshot(
                f"{source}: {len(data)} bytes, but {count} producer rows of {self._row_size} bytes "
                f"should end at {pos + count * self._row_size}"
            )
        self._data = data
        self._rows_at = pos
        self._count = count
        self.slots = slots
        self._pids: list[int] | None = None  # the producer-id column, read at the first lookup

    def __len__(self) -> int:
        return self._count

    def producer_id_at(self, row: int) -> int:
        return _PID.unpack_from(self._data, self._rows_at + row * self._row_size)[0]

    def find(self, producer_id: int) -> int | None:
        """The row of ``producer_id``, or None (a binary search: rows are sorted by producer id)."""
        pids = self._producer_ids()
        row = bisect_left(pids, producer_id)
        if row < self._count and pids[row] == producer_id:
            return row
        return None

    def insertion_row(self, producer_id: int) -> int:
        """Where a row for ``producer_id`` would go (the first row with a larger or equal id)."""
        return bisect_left(self._producer_ids(), producer_id)

    def _producer_ids(self) -> list[int]:
        # One pass over the rows (~20 ms for 100,000) the first time a producer is looked up: a list
        # of ints is what bisect searches at C speed. Loading itself stays free of per-row work.
        if self._pids is None:
            layout = struct.Struct(f">q{self._row_size - _PID.size}x")
            rows = self._data[self._rows_at : self._rows_at + self._count * self._row_size]
            self._pids = [pid for (pid,) in layout.iter_unpack(rows)]
        return self._pids

    def entry(self, row: int) -> ProducerStateEntry:
        pos = self._rows_at + row * self._row_size
        pid, epoch, coordinator_epoch, last_timestamp, txn_first_offset, batch_count = _ROW_HEAD.unpack_from(
            self._data, pos
        )
        if not 0 <= batch_count <= self.slots:
            raise CorruptSnapshot(f"producer {pid} has {batch_count} batches in {self.slots} slots")
        pos += _ROW_HEAD.size
        batches = tuple(
            BatchMetadata(*_BATCH.unpack_from(self._data, pos + i * _BATCH.size)) for i in range(batch_count)
        )
        return ProducerStateEntry(
            pid,
            epoch,
            batches,
            coordinator_epoch,
            last_timestamp,
            None if txn_first_offset < 0 else txn_first_offset,
        )

    def entries(self) -> list[ProducerStateEntry]:
        return [self.entry(row) for row in range(self._count)]

    def idle_rows(self, cutoff_timestamp: int) -> list[tuple[int, int]]:
        """``(row, producer_id)`` of rows without an open transaction whose last timestamp is at or
        before ``cutoff_timestamp`` (expiration), found without building entries."""
        rows = self._data[self._rows_at : self._rows_at + self._count * self._row_size]
        layout = struct.Struct(f">qhiqqb{self._row_size - _ROW_HEAD.size}x")
        return [
            (row, pid)
            for row, (pid, _epoch, _coordinator_epoch, timestamp, txn_first_offset, _count) in enumerate(
                layout.iter_unpack(rows)
            )
            if txn_first_offset < 0 and timestamp <= cutoff_timestamp
        ]

    def raw_rows(self, start: int, stop: int, slots: int) -> bytes | memoryview:
        """Rows ``[start, stop)`` as bytes laid out with ``slots`` batch slots (>= ours)."""
        begin = self._rows_at + start * self._row_size
        if slots == self.slots:
            return self._data[begin : self._rows_at + stop * self._row_size]
        padding = _ZERO_SLOT * (slots - self.slots)
        size = self._row_size
        return b"".join(
            bytes(self._data[at : at + size]) + padding
            for at in range(begin, begin + (stop - start) * size, size)
        )


# -- reading ---------------------------------------------------------------------------------------


def parse_snapshot(data: bytes | memoryview, *, source: str = "snapshot") -> SnapshotRows:
    """Check a snapshot's version and CRC and return its rows, undecoded (version 1 is converted)."""
    data = memoryview(data)
    if len(data) < _HEADER_SIZE:
        raise CorruptSnapshot(f"{source}: {len(data)} bytes is too short for a producer snapshot")
    (version,) = _VERSION.unpack_from(data, 0)
    if version not in SUPPORTED_VERSIONS:
        raise CorruptSnapshot(f"{source}: snapshot version {version}, expected one of {SUPPORTED_VERSIONS}")
    (stored_crc,) = _CRC.unpack_from(data, _VERSION.size)
    computed_crc = crc32c.crc32c(data[_HEADER_SIZE:])
    if stored_crc != computed_crc:
        raise CorruptSnapshot(
            f"{source}: CRC32C {computed_crc:#010x} does not match stored {stored_crc:#010x}"
        )
    if version == 1:
        return SnapshotRows(encode_snapshot(_decode_v1(data[_HEADER_SIZE:], source)), source=source)
    return SnapshotRows(data, source=source)


def decode_snapshot(data: bytes | memoryview, *, source: str = "snapshot") -> list[ProducerStateEntry]:
    """Every entry of a snapshot, by producer id, fully checked; ``CorruptSnapshot`` if anything is off."""
    rows = parse_snapshot(data, source=source)
    entries = rows.entries()
    pids = [entry.producer_id for entry in entries]
    if any(a >= b for a, b in zip(pids, pids[1:], strict=False)):
        raise CorruptSnapshot(f"{source}: producer ids are not strictly increasing")
    open_txns = [
        (e.producer_id, e.current_txn_first_offset) for e in entries if e.current_txn_first_offset is not None
    ]
    if open_txns != rows.open_transactions:
        raise CorruptSnapshot(f"{source}: the open-transaction section does not match the producer rows")
    return entries


_V1_COUNT = struct.Struct(">i")
_V1_ENTRY = struct.Struct(">qhiqqb")


def _decode_v1(body: memoryview, source: str) -> list[ProducerStateEntry]:
    """Version 1: int32 count, then per producer int64 pid, int16 epoch, int32 coordinator epoch,
    int64 last timestamp, int64 txn first offset (-1 none), int8 batch count, then the batches."""
    try:
        (count,) = _V1_COUNT.unpack_from(body, 0)
        if count < 0:
            raise CorruptSnapshot(f"{source}: negative producer count {count}")
        pos = _V1_COUNT.size
        entries = []
        for _ in range(count):
            pid, epoch, coordinator_epoch, last_timestamp, txn_first_offset, batch_count = (
                _V1_ENTRY.unpack_from(body, pos)
            )
            pos += _V1_ENTRY.size
            if not 0 <= batch_count <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshot(
                    f"{source}: producer {pid} has {batch_count} batches, at most {NUM_BATCHES_TO_RETAIN}"
                )
            batches = tuple(
                BatchMetadata(*_BATCH.unpack_from(body, pos + i * _BATCH.size)) for i in range(batch_count)
            )
            pos += batch_count * _BATCH.size
            entries.append(
                ProducerStateEntry(
                    pid,
                    epoch,
                    batches,
                    coordinator_epoch,
                    last_timestamp,
                    None if txn_first_offset < 0 else txn_first_offset,
                )
            )
    except struct.error as exc:
        raise CorruptSnapshot(f"{source}: truncated producer snapshot ({exc})") from exc
    if pos != len(body):
        raise CorruptSnapshot(f"{source}: {len(body) - pos} bytes after the last producer entry")
    if len({entry.producer_id for entry in entries}) != len(entries):
        raise CorruptSnapshot(f"{source}: a producer id appears twice")
    return entries


# -- writing ---------------------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """A version-2 snapshot of ``entries`` (any order; one entry per producer id)."""
    return encode_merged(None, (), {entry.producer_id: entry for entry in entries})


def encode_merged(
    base: SnapshotRows | None, taken_rows: Iterable[int], entries: Mapping[int, ProducerStateEntry]
) -> bytes:
    """A version-2 snapshot of ``entries`` plus the rows of ``base`` not in ``taken_rows``.

    Untouched rows are copied as they are (runs of rows in one slice), so a snapshot after a restart
    costs per *changed* producer, not per producer. ``entries`` must not hold a producer whose
    ``base`` row is still untaken.
    """
    slots = max((len(entry.batches) for entry in entries.values()), default=0)
    if base is not None:
        slots = max(slots, base.slots)
    slots = min(slots, NUM_BATCHES_TO_RETAIN)
    taken = set(taken_rows)
    # Cut points in base row order: insert a packed entry before row i (kind 0), or skip row i (kind 1).
    events: list[tuple[int, int, int]] = []
    for pid in entries:
        events.append((base.insertion_row(pid) if base is not None else 0, 0, pid))
    events.extend((row, 1, 0) for row in taken)
    events.sort()
    parts: list[bytes | memoryview] = []
    copied_to = 0
    for row, kind, pid in events:
        if row > copied_to and base is not None:
            parts.append(base.raw_rows(copied_to, row, slots))
            copied_to = row
        if kind == 0:
            parts.append(_pack_row(entries[pid], slots))
        else:
            copied_to = row + 1
    count = len(entries)
    txns = [
        (pid, entry.current_txn_first_offset)
        for pid, entry in entries.items()
        if entry.current_txn_first_offset is not None
    ]
    if base is not None:
        parts.append(base.raw_rows(copied_to, len(base), slots))
        count += len(base) - len(taken)
        if base.open_transactions:
            untaken = {pid for pid, _ in base.open_transactions if base.find(pid) not in taken}
            txns.extend(txn for txn in base.open_transactions if txn[0] in untaken)
    txns.sort()
    body = b"".join(
        [
            _COUNTS.pack(count, slots),
            _TXN_COUNT.pack(len(txns)),
            *(_TXN.pack(pid, first) for pid, first in txns),
            *parts,
        ]
    )
    return _VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(crc32c.crc32c(body)) + body


def _pack_row(entry: ProducerStateEntry, slots: int) -> bytes:
    batches = entry.batches[-NUM_BATCHES_TO_RETAIN:]
    txn_first_offset = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
    head = _ROW_HEAD.pack(
        entry.producer_id,
        entry.epoch,
        entry.coordinator_epoch,
        entry.last_timestamp,
        txn_first_offset,
        len(batches),
    )
    packed = [
        _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp) for b in batches
    ]
    return head + b"".join(packed) + _ZERO_SLOT * (slots - len(batches))
