"""The magic-2 record-batch header fast path (Kafka's ``DefaultRecordBatch``), pure: no I/O.

The broker never decodes records on the produce path: it unpacks the 61-byte header, checks the
CRC32C, patches ``baseOffset`` (which lies outside the CRC) and stores the producer's bytes. Every
function here costs O(batches), never O(records), except the two small helpers at the end that
tools, tests and ``offset_for_timestamp`` use on uncompressed batches.

Header layout (big-endian), byte offsets in brackets::

    baseOffset int64 [0]  batchLength int32 [8]  partitionLeaderEpoch int32 [12]  magic int8 [16]
    crc uint32 [17]  attributes int16 [21]  lastOffsetDelta int32 [23]  baseTimestamp int64 [27]
    maxTimestamp int64 [35]  producerId int64 [43]  producerEpoch int16 [51]  baseSequence int32 [53]
    recordsCount int32 [57]

``batchLength`` counts the bytes after itself, so a batch occupies ``batchLength + 12`` bytes; the CRC
covers everything from ``attributes`` to the end of the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from onceflow.protocol.errors import CorruptMessage, InvalidRecord, UnsupportedForMessageFormat

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch that batchLength does not count
MAGIC = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_BATCH_LENGTH_POS = 8
_PARTITION_LEADER_EPOCH_POS = 12
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35
# The smallest batchLength a header can have: everything after batchLength, zero records.
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40
_MAX_CODEC = 4  # zstd

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

# Kafka's RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH / NO_SEQUENCE: the one definition of each.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
# Epochs are int16: no producer may hold more than this, and the transaction coordinator never hands
# it out, so that it can always fence once more (an epoch of MAX_PRODUCER_EPOCH - 1 is "exhausted").
MAX_PRODUCER_EPOCH = 32767
_INT32_MAX = 0x7FFFFFFF


class BatchHeader(NamedTuple):
    """The 61-byte header of one magic-2 record batch, as read (offsets are the stored ones).

    A named tuple rather than a frozen dataclass: one is built for every batch the broker appends,
    replays or scans, and a tuple is made in a tenth of the time (no per-field ``__setattr__``).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_FLAG else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        """Whether the base timestamp is KIP-534's delete horizon (set by log compaction) rather than
        the first record's timestamp."""
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG else None

    @property
    def first_timestamp(self) -> int | None:
        """The first record's timestamp (the base timestamp), or None where compaction made the base
        timestamp a delete horizon."""
        return None if self.attributes & DELETE_HORIZON_FLAG else self.base_timestamp

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at Integer.MAX_VALUE back to 0, as in Kafka's DefaultRecordBatch.
        return (self.base_sequence + self.last_offset_delta) % (_INT32_MAX + 1)

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``pos`` without checking the CRC. Raises CorruptMessage if it is cut short."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptMessage(f"record batch header at byte {pos} is truncated ({len(buf) - pos} bytes left)")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def _checked_batch(view: memoryview, pos: int) -> tuple[BatchHeader, int]:
    """Header and size of the batch at ``pos``, checked for framing, magic and CRC (KafkaError if not)."""
    remaining = len(view) - pos
    if remaining < _MAGIC_POS + 1:
        raise CorruptMessage(f"record batch at byte {pos} is truncated ({remaining} bytes left)")
    magic = view[pos + _MAGIC_POS]
    if magic != MAGIC:
        raise UnsupportedForMessageFormat(
            f"record batch at byte {pos} has magic {magic}; only magic 2 is supported"
        )
    (batch_length,) = _INT32.unpack_from(view, pos + _BATCH_LENGTH_POS)
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptMessage(
            f"record batch at byte {pos} has batchLength {batch_length}, less than the {_MIN_BATCH_LENGTH}-byte minimum"
        )
    size = batch_length + LOG_OVERHEAD
    if size > remaining:
        raise CorruptMessage(
            f"record batch at byte {pos} claims {size} bytes but only {remaining} are present"
        )
    header = BatchHeader(*_HEADER.unpack_from(view, pos))
    computed = crc32c(view[pos + _ATTRIBUTES_POS : pos + size])
    if computed != header.crc:
        raise CorruptMessage(
            f"record batch at byte {pos} is corrupt (stored crc = {header.crc}, computed crc = {computed})"
        )
    if header.compression > _MAX_CODEC:
        raise CorruptMessage(f"record batch at byte {pos} has unknown compression codec {header.compression}")
    return header, size


def _check_client_fields(header: BatchHeader) -> None:
    """Kafka's ``LogValidator.validateBatch`` rules for a batch a client produced, in Kafka's order."""
    if header.last_offset_delta + 1 <= 0:
        raise InvalidRecord(
            f"Batch has an invalid offset range: [{header.base_offset}, {header.last_offset}]"
        )
    if header.record_count <= 0:
        raise InvalidRecord(f"Invalid reported count for record batch: {header.record_count}")
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecord(
            f"Inconsistent batch offset range [{header.base_offset}, {header.last_offset}] "
            f"and count of records {header.record_count}"
        )
    if header.is_control:
        raise InvalidRecord("Clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecord(
            f"Invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id}"
        )


def validate_produce_records(buf) -> list[tuple[BatchHeader, memoryview]]:
    """Check the record set of one partition in a Produce request, batch by batch.

    Returns ``(header, view of the whole batch)`` pairs; the views share ``buf`` (writable when ``buf``
    is, so the log can patch offsets in place). Raises UnsupportedForMessageFormat, CorruptMessage or
    InvalidRecord naming the first bad batch. An empty record set gives an empty list.
    """
    view = memoryview(buf)
    batches: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    end = len(view)
    while pos < end:
        header, size = _checked_batch(view, pos)
        _check_client_fields(header)
        batches.append((header, view[pos : pos + size]))
        pos += size
    return batches


def scan_batches(buf) -> tuple[list[tuple[BatchHeader, memoryview]], int]:
    """Batches from the start of ``buf`` up to the first incomplete or invalid one, for recovery.

    Returns the good batches and how many bytes they span; bytes after that are a torn or corrupt
    tail (or, when ``buf`` is a chunk of a file, possibly the start of a batch cut by the chunk end).
    """
    view = memoryview(buf)
    batches: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    end = len(view)
    while pos < end:
        try:
            header, size = _checked_batch(view, pos)
        except (CorruptMessage, UnsupportedForMessageFormat):
            break
        batches.append((header, view[pos : pos + size]))
        pos += size
    return batches, pos


def batch_size_at(buf, pos: int = 0) -> int | None:
    """The size the batch at ``pos`` claims (``batchLength + 12``), or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _INT32.unpack_from(buf, pos + _BATCH_LENGTH_POS)[0] + LOG_OVERHEAD


def set_base_offset(buf, pos: int, offset: int) -> None:
    """Overwrite ``baseOffset`` of the batch at ``pos``; it is outside the CRC, so nothing else changes."""
    _INT64.pack_into(buf, pos, offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Overwrite ``partitionLeaderEpoch`` (outside the CRC), as Kafka's leader does on append."""
    _INT32.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``pos`` as LogAppendTime with ``maxTimestamp = timestamp_ms``, then redo its CRC.

    Kafka's ``DefaultRecordBatch.setMaxTimestamp``: the base timestamp and the records stay as they
    are; readers take every record's timestamp from ``maxTimestamp`` when the type bit is set.
    """
    (attributes,) = _INT16.unpack_from(buf, pos + _ATTRIBUTES_POS)
    _INT16.pack_into(buf, pos + _ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_FLAG)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_POS, timestamp_ms)
    (batch_length,) = _INT32.unpack_from(buf, pos + _BATCH_LENGTH_POS)
    view = memoryview(buf)
    crc = crc32c(view[pos + _ATTRIBUTES_POS : pos + batch_length + LOG_OVERHEAD])
    _UINT32.pack_into(buf, pos + _CRC_POS, crc)


# --- varints (Kafka's zig-zag encoding, as protobuf's sint32/sint64) ---


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``pos``; returns ``(value, position after it)``."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptMessage("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


# --- control batches (transaction markers) ---

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker: a transactional control batch holding one COMMIT or ABORT record."""
    _header, buf = control_batch_for_append(
        producer_id,
        producer_epoch,
        commit=commit,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=timestamp_ms,
        base_offset=base_offset,
    )
    return bytes(buf)


def control_batch_for_append(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
) -> tuple[BatchHeader, bytearray]:
    """:func:`build_control_batch` as ``(header, writable bytes)``, ready for ``Log.append``."""
    return build_one_record_batch(
        _CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT),
        _CONTROL_VALUE.pack(0, coordinator_epoch),
        timestamp_ms=timestamp_ms,
        attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_offset=base_offset,
    )


def build_one_record_batch(
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp_ms: int,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_offset: int = 0,
) -> tuple[BatchHeader, bytearray]:
    """An uncompressed batch of one headerless record, and its header (so the caller need not read it
    back): what the broker writes for itself (markers, ``__transaction_state`` records). ``None`` key or
    value is a null one (a tombstone value)."""
    # DefaultRecord: attributes int8, timestampDelta varlong, offsetDelta varint, key, value, headers.
    # The three leading fields are all zero (one record, at the batch's own timestamp and offset).
    body = bytearray(b"\x00\x00\x00")
    if key is None:
        body += _NULL_LENGTH
    else:
        body += _length_varint(len(key))
        body += key
    if value is None:
        body += _NULL_LENGTH
    else:
        body += _length_varint(len(value))
        body += value
    body.append(0)  # no headers
    record_length = _length_varint(len(body))
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(record_length) + len(body)
    fields = (
        base_offset,
        batch_length,
        -1,  # partitionLeaderEpoch: the log stamps its own on append
        MAGIC,
        0,  # crc, filled in below
        attributes,
        0,  # lastOffsetDelta: one record
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        NO_SEQUENCE,
        1,
    )
    buf = bytearray(_HEADER.pack(*fields))
    buf += record_length
    buf += body
    crc = crc32c(memoryview(buf)[_ATTRIBUTES_POS:])
    _UINT32.pack_into(buf, _CRC_POS, crc)
    header = BatchHeader(*fields[:4], crc, *fields[5:])
    return header, buf


_NULL_LENGTH = b"\x01"  # zig-zag varint of -1
_ONE_BYTE_VARINTS = [bytes((n << 1,)) for n in range(64)]  # zig-zag varints of 0..63


def _length_varint(n: int) -> bytes:
    return _ONE_BYTE_VARINTS[n] if n < 64 else encode_varint(n)


def read_control_record(buf, pos: int = 0) -> tuple[int, int]:
    """``(control type, coordinator epoch)`` of the control batch at ``pos`` (type 0 abort, 1 commit)."""
    header = read_header(buf, pos)
    if not header.is_control:
        raise InvalidRecord(f"batch at offset {header.base_offset} is not a control batch")
    p = pos + BATCH_HEADER_SIZE
    _length, p = decode_varint(buf, p)
    p += 1  # record attributes
    _timestamp_delta, p = decode_varint(buf, p)
    _offset_delta, p = decode_varint(buf, p)
    key_length, p = decode_varint(buf, p)
    if key_length < _CONTROL_KEY.size:
        raise CorruptMessage(f"control record key has {key_length} bytes, expected at least 4")
    _version, control_type = _CONTROL_KEY.unpack_from(buf, p)
    p += key_length
    value_length, p = decode_varint(buf, p)
    coordinator_epoch = -1
    if value_length >= _CONTROL_VALUE.size:
        _version, coordinator_epoch = _CONTROL_VALUE.unpack_from(buf, p)
    return control_type, coordinator_epoch


def iter_record_timestamps(batch) -> Iterator[tuple[int, int]]:
    """``(offset, timestamp)`` of every record of one uncompressed batch (a bytes-like of the whole batch).

    LogAppendTime batches report ``maxTimestamp`` for every record, as Kafka's readers do.
    """
    header = read_header(batch)
    if header.compression:
        raise ValueError("iter_record_timestamps needs an uncompressed batch")
    p = BATCH_HEADER_SIZE
    end = header.size
    for _ in range(header.record_count):
        if p >= end:
            raise CorruptMessage(
                f"batch at offset {header.base_offset} ends before its {header.record_count} records"
            )
        length, body = decode_varint(batch, p)
        q = body + 1  # skip attributes
        timestamp_delta, q = decode_varint(batch, q)
        offset_delta, q = decode_varint(batch, q)
        timestamp = header.max_timestamp if header.timestamp_type else header.base_timestamp + timestamp_delta
        yield header.base_offset + offset_delta, timestamp
        p = body + length
