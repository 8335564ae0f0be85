"""The record-batch header fast path, checked against batches built by aiokafka's independent encoder."""

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from onceflow.protocol import records
from onceflow.protocol.errors import CorruptMessage, InvalidRecord, UnsupportedForMessageFormat


def make_batch(
    n=3,
    *,
    base_timestamp=1_000,
    compression=0,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    transactional=False,
    value=b"value",
):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=10**7,
    )
    for i in range(n):
        builder.append(i, timestamp=base_timestamp + i * 10, key=b"k%d" % i, value=value, headers=[])
    return bytearray(builder.build())


def recrc(buf, pos=0):
    """Recompute the CRC after a test edits fields inside it (so only the edited rule trips)."""
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : pos + size])))


def test_header_fields_match_aiokafka():
    buf = make_batch(5, producer_id=42, producer_epoch=3, base_sequence=7, transactional=True)
    header = records.read_header(buf)
    reference = DefaultRecordBatch(bytes(buf))
    assert header.magic == 2
    assert header.size == len(buf)
    assert header.crc == reference.crc
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.last_offset == 4
    assert header.base_timestamp == 1_000
    assert header.max_timestamp == 1_040
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.last_sequence == 11
    assert header.is_transactional and not header.is_control
    assert header.compression == 0 and header.timestamp_type == 0


def test_last_sequence_wraps_at_int32_max():
    buf = make_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert records.read_header(buf).last_sequence == 0


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_compression_bits(codec):
    assert records.read_header(make_batch(4, compression=codec)).compression == codec


def test_validate_accepts_several_batches_and_views_share_buffer():
    buf = make_batch(2) + make_batch(3) + make_batch(1)
    batches = records.validate_produce_records(buf)
    assert [h.record_count for h, _ in batches] == [2, 3, 1]
    assert sum(len(v) for _, v in batches) == len(buf)
    records.set_base_offset(batches[1][1], 0, 99)
    assert records.read_header(buf, len(batches[0][1])).base_offset == 99


def test_validate_empty_record_set():
    assert records.validate_produce_records(b"") == []


def test_crc_mismatch_is_corrupt():
    buf = make_batch(3)
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="crc"):
        records.validate_produce_records(buf)


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_is_unsupported(magic):
    buf = make_batch(2)
    buf[16] = magic
    with pytest.raises(UnsupportedForMessageFormat):
        records.validate_produce_records(buf)


def test_truncated_batch_is_corrupt():
    buf = make_batch(3)
    with pytest.raises(CorruptMessage):
        records.validate_produce_records(buf[:-5])
    with pytest.raises(CorruptMessage):
        records.validate_produce_records(buf + buf[:10])


def test_batch_length_below_header_is_corrupt():
    buf = make_batch(1)
    struct.pack_into(">i", buf, 8, 20)
    with pytest.raises(CorruptMessage, match="batchLength"):
        records.validate_produce_records(buf)


def test_negative_last_offset_delta_is_invalid_record():
    buf = make_batch(2)
    struct.pack_into(">i", buf, 23, -1)
    recrc(buf)
    with pytest.raises(InvalidRecord, match="invalid offset range"):
        records.validate_produce_records(buf)


def test_record_count_mismatch_is_invalid_record():
    buf = make_batch(2)
    struct.pack_into(">i", buf, 57, 0)
    recrc(buf)
    with pytest.raises(InvalidRecord, match="count"):
        records.validate_produce_records(buf)
    struct.pack_into(">i", buf, 57, 5)
    recrc(buf)
    with pytest.raises(InvalidRecord, match="Inconsistent"):
        records.validate_produce_records(buf)


def test_control_batch_from_client_is_invalid_record():
    marker = bytearray(records.build_control_batch(5, 1, commit=True, coordinator_epoch=0, timestamp_ms=1))
    with pytest.raises(InvalidRecord, match="control"):
        records.validate_produce_records(marker)


def test_producer_id_without_sequence_is_invalid_record():
    buf = make_batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
    struct.pack_into(">i", buf, 53, -1)
    recrc(buf)
    with pytest.raises(InvalidRecord, match="sequence"):
        records.validate_produce_records(buf)


def test_unknown_codec_is_corrupt():
    buf = make_batch(1)
    struct.pack_into(">h", buf, 21, 6)
    recrc(buf)
    with pytest.raises(CorruptMessage, match="codec"):
        records.validate_produce_records(buf)


def test_scan_stops_at_torn_tail():
    good = make_batch(2) + make_batch(3)
    batches, valid = records.scan_batches(good + make_batch(4)[:30])
    assert valid == len(good)
    assert len(batches) == 2
    corrupt = make_batch(2)
    corrupt[70] ^= 1
    batches, valid = records.scan_batches(good + corrupt + make_batch(1))
    assert valid == len(good) and len(batches) == 2


def test_batch_size_at():
    buf = make_batch(2)
    assert records.batch_size_at(buf) == len(buf)
    assert records.batch_size_at(buf[:11]) is None


def test_set_base_offset_keeps_crc_valid():
    buf = make_batch(3)
    records.set_base_offset(buf, 0, 1234567)
    records.set_partition_leader_epoch(buf, 0, 7)
    reference = DefaultRecordBatch(bytes(buf))
    assert reference.base_offset == 1234567
    assert reference.validate_crc()
    header = records.validate_produce_records(buf)[0][0]
    assert header.base_offset == 1234567 and header.partition_leader_epoch == 7


def test_set_log_append_time_rewrites_type_and_max_timestamp():
    buf = make_batch(3, base_timestamp=500)
    records.set_log_append_time(buf, 0, 9_999)
    header = records.validate_produce_records(buf)[0][0]  # CRC still valid
    assert header.timestamp_type == 1
    assert header.max_timestamp == 9_999
    assert header.base_timestamp == 500
    reference = DefaultRecordBatch(bytes(buf))
    assert reference.validate_crc()
    assert [r.timestamp for r in reference] == [9_999] * 3
    assert [t for _, t in records.iter_record_timestamps(buf)] == [9_999] * 3


def test_set_log_append_time_inside_larger_buffer():
    first, second = make_batch(2), make_batch(3)
    buf = first + second
    records.set_log_append_time(buf, len(first), 77)
    headers = [h for h, _ in records.validate_produce_records(buf)]
    assert [h.timestamp_type for h in headers] == [0, 1]


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_decodes_with_aiokafka(commit):
    buf = records.build_control_batch(
        77, 4, commit=commit, coordinator_epoch=12, timestamp_ms=1_700_000_000_000, base_offset=50
    )
    reference = DefaultRecordBatch(buf)
    assert reference.validate_crc()
    assert reference.is_control_batch and reference.is_transactional
    assert (reference.producer_id, reference.producer_epoch, reference.base_sequence) == (77, 4, -1)
    (record,) = list(reference)
    assert record.offset == 50
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 12)
    assert record.timestamp == 1_700_000_000_000
    assert records.read_control_record(buf) == (1 if commit else 0, 12)
    header = records.read_header(buf)
    assert header.record_count == 1 and header.is_control and header.base_offset == 50


def test_read_control_record_rejects_data_batch():
    with pytest.raises(InvalidRecord):
        records.read_control_record(make_batch(1))


def test_iter_record_timestamps_matches_aiokafka():
    buf = make_batch(6, base_timestamp=10_000)
    records.set_base_offset(buf, 0, 300)
    expected = [(r.offset, r.timestamp) for r in DefaultRecordBatch(bytes(buf))]
    assert list(records.iter_record_timestamps(buf)) == expected
    assert expected[0] == (300, 10_000)


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**62, -(2**63)])
def test_varint_round_trip(value):
    encoded = records.encode_varint(value)
    assert records.decode_varint(encoded + b"\xff", 0) == (value, len(encoded))
