"""Whole magic-2 record batches: build them from records and decode them back, for clients and tools.

The broker's produce path never comes here (it works on headers only, see ``protocol.records``).
Record encoding and decoding use aiokafka's Cython ``DefaultRecordBatchBuilder`` / ``DefaultRecordBatch``
(5-15x faster than pure Python), except in ``rebuild_batch`` (log compaction), which writes its records
itself so that it can set a delete horizon as the base timestamp. Compression is ours
(``protocol.compression``): we build the batch uncompressed, compress the records section and rewrite
the header. That keeps the codec quirks
(xerial snappy, independent lz4 blocks, zstd without content size) in one place, and the batch always
carries the codec asked for (aiokafka's builder silently falls back to none when compression does not
shrink the data).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from onceflow.protocol.compression import CompressionType, compress, decompress
from onceflow.protocol.errors import CorruptMessage, InvalidRecord, UnsupportedForMessageFormat
from onceflow.protocol.records import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    DELETE_HORIZON_FLAG,
    LOG_OVERHEAD,
    BatchHeader,
    encode_varint,
    read_header,
)

__all__ = [
    "ControlMarker",
    "DecodedBatch",
    "ProducerRecord",
    "Record",
    "RecordColumns",
    "decode_batches",
    "decode_columns",
    "decode_control",
    "decode_record_objects",
    "encode_batch",
    "rebuild_batch",
    "split_batches",
]

# Byte positions inside the 61-byte batch header (Kafka's DefaultRecordBatch layout).
_BATCH_LENGTH_POS = 8
_CRC_POS = 17
_ATTRIBUTES_POS = 21  # the CRC covers everything from here to the end of the batch

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
# Everything after the CRC that rebuild_batch copies from the original header: attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount.
_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch

# The builder refuses records beyond its size limit; ours has none (the broker enforces
# max.message.bytes), so give it the largest int32.
_NO_SIZE_LIMIT = 2**31 - 1


class ProducerRecord(NamedTuple):
    """A record to encode; ``timestamp`` None means the batch's default timestamp."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | tuple = ()
    timestamp: int | None = None


class Record(NamedTuple):
    """A decoded record with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The payload of a control batch: a transaction marker."""

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]
    control: ControlMarker | None = None  # set only for control batches

    @property
    def is_control(self) -> bool:
        return self.header.is_control


def encode_batch(
    records: Iterable[Any],
    *,
    compression: int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
) -> bytes:
    """One magic-2 batch holding ``records``, compressed with ``compression``.

    Each record is a :class:`ProducerRecord` (or anything with ``key``, ``value``, ``headers`` and
    ``timestamp`` attributes, such as a decoded :class:`Record`) or a plain tuple
    ``(key, value[, headers[, timestamp]])``. Records without a timestamp get ``timestamp_ms``, or
    the current time.
    """
    if compression not in CompressionType.__members__.values():
        compress(compression, b"")  # raises UnsupportedCompressionType naming the codec
    default_ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    builder = DefaultRecordBatchBuilder(
        2, 0, int(transactional), producer_id, producer_epoch, base_sequence, _NO_SIZE_LIMIT
    )
    append = builder.append
    count = 0
    for item in records:
        if type(item) is tuple and len(item) == 2:  # the common (key, value) case, kept cheap
            key, value = item
            headers: list = []
            timestamp = default_ts
        else:
            rec = item if hasattr(item, "key") else ProducerRecord(*item)
            key, value = rec.key, rec.value
            headers = [(name, _as_bytes(val, "header value")) for name, val in rec.headers]
            timestamp = rec.timestamp if rec.timestamp is not None else default_ts
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        append(count, timestamp, key, value, headers)
        count += 1
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    batch = builder.build()
    if compression != CompressionType.NONE:
        batch = _compress_batch(batch, compression)
    _INT64.pack_into(batch, 0, base_offset)
    return bytes(batch)


def rebuild_batch(
    header: BatchHeader,
    retained: list,
    *,
    delete_horizon_ms: int | None = None,
    compression: int | None = None,
    level: int | None = None,
) -> bytes:
    """The batch that ``header`` heads, holding only ``retained`` (some of its records, as
    :func:`decode_record_objects` returns them, in order): what log compaction writes back.

    The batch keeps its base offset, its offset range (``lastOffsetDelta``: a producer's last sequence is
    read from it), its producer id, epoch and base sequence, its attributes, codec, partition leader
    epoch and max timestamp; only the records and the base timestamp change. With nothing retained it
    is an empty batch, the header alone, which is how Kafka's cleaner keeps a producer's last batch.

    ``delete_horizon_ms`` sets KIP-534's delete horizon: the base timestamp becomes the horizon (the
    time after which the cleaner may remove the batch's tombstones or its marker) and the attributes
    say so; every record keeps its own timestamp, as a delta from that base (negative, usually), which
    is how every reader computes it. A batch that already has a horizon keeps it.

    ``compression`` (with ``level``) stores the records with another codec: a topic's
    ``compression.type`` that differs from the producer's.
    """
    codec = header.compression if compression is None else compression
    attributes = header.attributes & ~COMPRESSION_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
        base_timestamp = delete_horizon_ms
    elif header.has_delete_horizon or not retained:
        base_timestamp = header.base_timestamp
    else:
        base_timestamp = retained[0].timestamp
    out = bytearray(BATCH_HEADER_SIZE)
    for record in retained:
        _append_record(out, record, header.base_offset, base_timestamp)
    if not retained:
        codec = CompressionType.NONE  # no records section to compress
    _INT64.pack_into(out, 0, header.base_offset)
    _INT32.pack_into(out, _BATCH_LENGTH_POS, len(out) - LOG_OVERHEAD)
    _INT32.pack_into(out, 12, header.partition_leader_epoch)
    out[16] = 2  # magic
    _HEADER_AFTER_CRC.pack_into(
        out,
        _ATTRIBUTES_POS,
        attributes,
        header.last_offset_delta,
        base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(retained),
    )
    if codec != CompressionType.NONE:
        return bytes(_compress_batch(out, codec, level))  # sets the codec bit and the CRC
    _UINT32.pack_into(out, _CRC_POS, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_POS:]))
    return bytes(out)


def _append_record(out: bytearray, record: Any, base_offset: int, base_timestamp: int) -> None:
    """One DefaultRecord (length, attributes, timestampDelta, offsetDelta, key, value, headers) of a
    decoded record, its deltas taken from the given bases. aiokafka's builder takes its base timestamp
    from the first record, so it cannot write a batch with a delete horizon."""
    body = bytearray(b"\x00")  # record attributes: unused
    body += encode_varint(record.timestamp - base_timestamp)
    body += encode_varint(record.offset - base_offset)
    _append_bytes(body, record.key)
    _append_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for name, value in record.headers:
        _append_bytes(body, name.encode() if isinstance(name, str) else name)
        _append_bytes(body, value)
    out += encode_varint(len(body))
    out += body


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data


def _as_bytes(data: Any, what: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"record {what} must be bytes or None, not {type(data).__name__}")


def _compress_batch(batch: bytearray, codec: int, level: int | None = None) -> bytearray:
    """Replace the records section of an uncompressed batch with its compressed form."""
    compressed = compress(codec, memoryview(batch)[BATCH_HEADER_SIZE:], level)
    out = bytearray(batch[:BATCH_HEADER_SIZE])
    out += compressed
    _INT32.pack_into(out, _BATCH_LENGTH_POS, len(out) - LOG_OVERHEAD)
    (attributes,) = _INT16.unpack_from(out, _ATTRIBUTES_POS)
    _INT16.pack_into(out, _ATTRIBUTES_POS, (attributes & ~COMPRESSION_MASK) | codec)
    _UINT32.pack_into(out, _CRC_POS, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_POS:]))
    return out


def split_batches(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every complete batch in ``buf`` as its header and its bytes, records not decoded.

    A trailing partial batch is ignored, as Kafka's consumers do: a fetch response may end in the
    middle of a batch. A batch that is complete but bad raises ``CorruptMessage``; a batch that is
    not magic 2 raises ``UnsupportedForMessageFormat``.
    """
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while end - pos >= BATCH_HEADER_SIZE:
        header = read_header(view, pos)
        if header.magic != 2:
            raise UnsupportedForMessageFormat(
                f"batch at byte {pos} has magic {header.magic}; only magic 2 record batches are supported"
            )
        size = header.size
        if size < BATCH_HEADER_SIZE:
            raise CorruptMessage(
                f"batch at byte {pos} has length {header.batch_length}, below the header size"
            )
        if pos + size > end:
            break
        batch = view[pos : pos + size]
        if check_crc and crc32c.crc32c(batch[_ATTRIBUTES_POS:]) != header.crc:
            raise CorruptMessage(f"batch at offset {header.base_offset} fails its CRC32C check")
        yield header, batch
        pos += size


def decode_batches(buf: bytes | bytearray | memoryview, *, check_crc: bool = True) -> Iterator[DecodedBatch]:
    """Every complete batch in ``buf`` with its records, in order (see :func:`split_batches`)."""
    for header, batch in split_batches(buf, check_crc=check_crc):
        yield _decode_one(header, batch)


class RecordColumns(NamedTuple):
    """The records of one batch as columns (no object per record): the fast path for readers that
    build columnar data (Arrow). ``headers`` is None when no record of the batch has headers."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]] | None


def decode_columns(header: BatchHeader, batch: memoryview) -> RecordColumns:
    """The records of one data batch (a pair from :func:`split_batches`) as columns."""
    records = _read_records(header, batch)
    headers = [r.headers for r in records]
    return RecordColumns(
        [r.offset for r in records],
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        headers if any(headers) else None,
    )


def decode_record_objects(header: BatchHeader, batch: memoryview) -> list:
    """The records of one data batch (a pair from :func:`split_batches`) as the Cython reader's own
    record objects: attributes ``offset``, ``timestamp``, ``key``, ``value``, ``headers`` as on
    :class:`Record`, but not tuples. The consumer's fast path: no second object per record."""
    return _read_records(header, batch)


def decode_control(header: BatchHeader, batch: memoryview) -> ControlMarker:
    """The transaction marker a control batch (a pair from :func:`split_batches`) carries."""
    return _control_marker(header, _read_records(header, batch))


def _read_records(header: BatchHeader, batch: memoryview) -> list:
    """aiokafka's records of one batch, decompressed by us and checked against the record count."""
    codec = header.compression
    if codec != CompressionType.NONE:
        # Hand aiokafka's reader an uncompressed copy, so decompression stays ours.
        plain = bytearray(batch[:BATCH_HEADER_SIZE])
        plain += decompress(codec, batch[BATCH_HEADER_SIZE:])
        (attributes,) = _INT16.unpack_from(plain, _ATTRIBUTES_POS)
        _INT16.pack_into(plain, _ATTRIBUTES_POS, attributes & ~COMPRESSION_MASK)
        raw = bytes(plain)
    else:
        raw = bytes(batch)
    try:
        records = list(DefaultRecordBatch(raw))
    except CorruptMessage:
        raise
    except Exception as exc:  # the Cython reader raises its own CorruptRecordException and friends
        raise CorruptMessage(f"records of batch at offset {header.base_offset} do not decode: {exc}")
    if len(records) != header.record_count:
        raise CorruptMessage(
            f"batch at offset {header.base_offset} declares {header.record_count} records, holds {len(records)}"
        )
    return records


# Record objects built without a Python frame per record: attrgetter reads the five fields of
# aiokafka's record into a tuple and tuple.__new__ retypes it as a Record, both in C (the list
# comprehension calling Record(...) spent ~0.5-1 us a record, as much as decoding it).
_RECORD_FIELDS = attrgetter("offset", "timestamp", "key", "value", "headers")
_new_tuple = tuple.__new__


def _as_records(decoded: list) -> list[Record]:
    return list(map(_new_tuple, repeat(Record, len(decoded)), map(_RECORD_FIELDS, decoded)))


def _decode_one(header: BatchHeader, batch: memoryview) -> DecodedBatch:
    records = _as_records(_read_records(header, batch))
    control = _control_marker(header, records) if header.is_control else None
    return DecodedBatch(header, records, control)


def _control_marker(header: BatchHeader, records: list) -> ControlMarker:
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        raise InvalidRecord(f"control batch at offset {header.base_offset} must hold one control record")
    _version, marker_type = _CONTROL_KEY.unpack_from(records[0].key)
    if marker_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        raise InvalidRecord(f"control batch at offset {header.base_offset} has unknown type {marker_type}")
    value = records[0].value
    coordinator_epoch = -1
    if value is not None and len(value) >= _CONTROL_VALUE.size:
        _vversion, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return ControlMarker(commit=marker_type == CONTROL_TYPE_COMMIT, coordinator_epoch=coordinator_epoch)
