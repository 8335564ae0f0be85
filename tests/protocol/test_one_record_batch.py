"""The broker's own one-record batches (``__transaction_state`` records, transaction markers), built
without a batch builder: checked byte for byte against aiokafka's independent encoder and read back
through our reader and aiokafka's."""

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from onceflow.protocol import records


def _aiokafka_batch(key, value, timestamp_ms, *, producer_id=-1, producer_epoch=-1):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    builder.append(0, timestamp=timestamp_ms, key=key, value=value, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"k", b"v"),
        (None, b"value"),
        (b"key", None),  # a tombstone
        (b"", b""),
        (b"a" * 63, b"b" * 64),  # around the one-byte varint boundary
        (b"c" * 300, b"d" * 70_000),  # multi-byte lengths
    ],
)
def test_same_bytes_as_an_independent_encoder(key, value):
    header, buf = records.build_one_record_batch(key, value, timestamp_ms=1_700_000_000_123)
    assert bytes(buf) == _aiokafka_batch(key, value, 1_700_000_000_123)
    assert header == records.read_header(buf)  # the header handed back is the one in the bytes
    assert records.validate_produce_records(bytearray(buf))[0][0] == header  # CRC and framing check out


@given(
    key=st.one_of(st.none(), st.binary(max_size=300)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    timestamp=st.integers(0, 2**62),
)
def test_any_record_reads_back(key, value, timestamp):
    header, buf = records.build_one_record_batch(key, value, timestamp_ms=timestamp)
    [batch] = list(DefaultRecordBatch(bytes(buf)))
    assert (batch.key, batch.value, batch.timestamp) == (key, value, timestamp)
    assert header.record_count == 1 and header.last_offset_delta == 0 and header.size == len(buf)


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_for_append_is_the_marker(commit):
    header, buf = records.control_batch_for_append(
        77, 3, commit=commit, coordinator_epoch=5, timestamp_ms=1_000, base_offset=9
    )
    assert bytes(buf) == records.build_control_batch(
        77, 3, commit=commit, coordinator_epoch=5, timestamp_ms=1_000, base_offset=9
    )
    assert header == records.read_header(buf)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (77, 3, 9)
    expected_type = records.CONTROL_TYPE_COMMIT if commit else records.CONTROL_TYPE_ABORT
    assert records.read_control_record(buf) == (expected_type, 5)


def test_batch_header_is_immutable():
    header, _buf = records.build_one_record_batch(b"k", b"v", timestamp_ms=1)
    with pytest.raises(AttributeError):
        header.base_offset = 5  # type: ignore[misc]
