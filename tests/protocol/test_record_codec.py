"""Whole-batch encode/decode: round trips for every codec, cross-checked with kio and aiokafka."""

import io
import os
import struct

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch
from kio.records.schema import Record as KioRecord
from kio.records.schema import RecordHeader as KioHeader
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from onceflow.protocol.compression import CompressionType
from onceflow.protocol.errors import CorruptMessage, UnsupportedCompressionType, UnsupportedForMessageFormat
from onceflow.protocol.record_codec import (
    ProducerRecord,
    Record,
    decode_batches,
    decode_record_objects,
    encode_batch,
    rebuild_batch,
    split_batches,
)
from onceflow.protocol.records import build_control_batch, validate_produce_records

TS = 1_700_000_000_000
SAMPLE = [
    ProducerRecord(b"k0", b"v0", [("trace", b"abc"), ("empty", None)], TS),
    ProducerRecord(None, b"value with null key", (), TS + 5),
    ProducerRecord(b"tombstone", None, (), TS + 2),
    ProducerRecord(b"", b"", (), None),  # empty, not null; gets the batch default timestamp
]


def _decode_one(buf):
    batches = list(decode_batches(buf))
    assert len(batches) == 1
    return batches[0]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_round_trip_every_codec(codec):
    buf = encode_batch(SAMPLE, compression=codec, base_offset=42, timestamp_ms=TS + 1)
    batch = _decode_one(buf)
    assert batch.header.compression == codec
    assert batch.header.base_offset == 42
    assert batch.header.record_count == 4
    assert batch.header.last_offset == 45
    assert batch.header.max_timestamp == TS + 5
    assert batch.control is None
    assert batch.records == [
        Record(42, TS, b"k0", b"v0", [("trace", b"abc"), ("empty", None)]),
        Record(43, TS + 5, None, b"value with null key", []),
        Record(44, TS + 2, b"tombstone", None, []),
        Record(45, TS + 1, b"", b"", []),
    ]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_large_batch_round_trip(codec):
    records = [(f"key-{i}".encode(), os.urandom(50) + b"x" * (i % 300)) for i in range(5000)]
    batch = _decode_one(encode_batch(records, compression=codec))
    assert [(r.key, r.value) for r in batch.records] == records
    assert [r.offset for r in batch.records] == list(range(5000))


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_aiokafka_reads_our_batches_with_its_own_codecs(codec):
    buf = encode_batch(SAMPLE, compression=codec, timestamp_ms=TS)
    reader = DefaultRecordBatch(buf)
    assert reader.validate_crc()
    assert reader.compression_type == codec
    assert [(r.key, r.value) for r in reader] == [(r.key, r.value) for r in SAMPLE]


def test_producer_fields_and_transactional_flag():
    buf = encode_batch(
        [(b"k", b"v")] * 3, producer_id=7001, producer_epoch=3, base_sequence=12, transactional=True
    )
    header = _decode_one(buf).header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7001, 3, 12)
    assert header.is_transactional
    assert not header.is_control


def test_kio_reads_our_uncompressed_batch():
    buf = encode_batch(
        SAMPLE, producer_id=5, producer_epoch=1, base_sequence=0, base_offset=10, timestamp_ms=TS
    )
    kio_batch, size = read_batch(buf, 0)
    assert size == len(buf)
    assert (kio_batch.base_offset, kio_batch.producer_id, kio_batch.base_sequence) == (10, 5, 0)
    assert [(r.offset, r.key, r.value) for r in kio_batch.records] == [
        (10 + i, r.key, r.value) for i, r in enumerate(SAMPLE)
    ]
    assert [(h.key, h.value) for h in kio_batch.records[0].headers] == [(b"trace", b"abc"), (b"empty", None)]


def test_we_read_a_batch_kio_wrote():
    import datetime

    when = TZAwareMicros.parse(datetime.datetime.fromtimestamp(TS / 1000, datetime.UTC))
    kio_records = tuple(
        KioRecord(
            attributes=i8(0),
            timestamp=when,
            offset=i64(i),
            key=f"k{i}".encode(),
            value=None if i == 1 else b"v",
            headers=(KioHeader(key=b"h", value=b"1"),),
        )
        for i in range(3)
    )
    out = io.BytesIO()
    write_new_batch(
        out,
        NewRecordBatch(
            producer_id=i64(9),
            producer_epoch=i16(2),
            base_sequence=i32(4),
            records=kio_records,
            attributes=i16(0),
        ),
    )
    batch = _decode_one(out.getvalue())
    assert batch.header.producer_id == 9 and batch.header.base_sequence == 4
    assert [(r.offset, r.key, r.value, r.headers) for r in batch.records] == [
        (0, b"k0", b"v", [("h", b"1")]),
        (1, b"k1", None, [("h", b"1")]),
        (2, b"k2", b"v", [("h", b"1")]),
    ]


@pytest.mark.parametrize("commit", [True, False])
def test_control_batches_decode_as_markers(commit):
    buf = build_control_batch(4000, 2, commit=commit, coordinator_epoch=17, timestamp_ms=TS, base_offset=99)
    batch = _decode_one(buf)
    assert batch.is_control and batch.header.is_transactional
    assert batch.control.commit is commit
    assert batch.control.coordinator_epoch == 17
    assert batch.records[0].offset == 99


def test_several_batches_and_a_partial_tail():
    first = encode_batch([(b"a", b"1")], base_offset=0, compression=CompressionType.LZ4)
    second = encode_batch([(b"b", b"2"), (b"c", b"3")], base_offset=1, compression=CompressionType.ZSTD)
    third = encode_batch([(b"d", b"4")], base_offset=3)
    buf = first + second + third[:-5]  # a fetch may end inside a batch
    batches = list(decode_batches(buf))
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2]


def test_bad_crc_is_corrupt_message():
    buf = bytearray(encode_batch([(b"k", b"v")]))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="CRC32C"):
        list(decode_batches(buf))


def test_corrupt_compressed_payload_with_valid_crc_is_corrupt_message():
    buf = bytearray(encode_batch([(b"k", b"v" * 100)], compression=CompressionType.GZIP))
    buf[70:80] = b"\x00" * 10
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    with pytest.raises(CorruptMessage):
        list(decode_batches(buf))


def test_old_magic_is_rejected():
    buf = bytearray(encode_batch([(b"k", b"v")]))
    buf[16] = 1
    with pytest.raises(UnsupportedForMessageFormat):
        list(decode_batches(buf))


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(UnsupportedCompressionType):
        encode_batch([(b"k", b"v")], compression=9)
    with pytest.raises(TypeError, match="key must be bytes"):
        encode_batch([("text key", b"v")])


def test_decoded_records_re_encode():
    original = _decode_one(encode_batch(SAMPLE, timestamp_ms=TS))
    again = _decode_one(encode_batch(original.records, compression=CompressionType.SNAPPY))
    assert again.records == original.records


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_broker_produce_validation_accepts_our_batches(codec):
    first = encode_batch(SAMPLE, compression=codec, producer_id=1, producer_epoch=0, base_sequence=0)
    second = encode_batch([(b"k", b"v")], compression=codec, producer_id=1, producer_epoch=0, base_sequence=4)
    validated = validate_produce_records(first + second)
    assert [h.record_count for h, _view in validated] == [4, 1]
    assert [h.compression for h, _view in validated] == [codec, codec]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_rebuilt_batch_without_a_horizon_is_the_batch_a_producer_would_write(codec):
    # rebuild_batch writes records itself (so that it can set a delete horizon): with all records kept
    # and no horizon, its bytes must be the original encoder's.
    original = encode_batch(SAMPLE[:3], compression=codec, base_offset=42, producer_id=9, producer_epoch=2)
    header, view = next(split_batches(original))
    rebuilt = rebuild_batch(header, decode_record_objects(header, view))
    assert rebuilt == original


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_a_delete_horizon_keeps_every_records_timestamp(codec):
    # KIP-534: the base timestamp becomes the horizon and record timestamps become deltas from it.
    original = encode_batch(SAMPLE[:3], compression=codec, base_offset=42)
    header, view = next(split_batches(original))
    rebuilt = rebuild_batch(
        header, decode_record_objects(header, view)[1:], delete_horizon_ms=TS + 86_400_000
    )
    batch = _decode_one(rebuilt)
    assert batch.header.delete_horizon_ms == TS + 86_400_000
    assert batch.header.max_timestamp == header.max_timestamp
    assert batch.header.compression == codec
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == [
        (43, TS + 5, None, b"value with null key"),
        (44, TS + 2, b"tombstone", None),
    ]
    # A reader that knows nothing of horizons (aiokafka's) computes the same timestamps.
    if codec == CompressionType.NONE:
        assert [r.timestamp for r in DefaultRecordBatch(rebuilt)] == [TS + 5, TS + 2]
    # A second rebuild keeps the horizon.
    again = rebuild_batch(batch.header, decode_record_objects(*next(split_batches(rebuilt)))[1:])
    assert _decode_one(again).header.delete_horizon_ms == TS + 86_400_000
