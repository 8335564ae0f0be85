import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.broker.txn.log_format import (
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from onceflow.protocol.errors import CorruptMessage


def _value(**overrides):
    fields = dict(
        producer_id=4242,
        producer_epoch=7,
        transaction_timeout_ms=60_000,
        transaction_status=1,  # Ongoing
        transaction_partitions=frozenset({("orders", 0), ("orders", 2), ("payments", 1)}),
        transaction_last_update_timestamp_ms=1_700_000_000_123,
        transaction_start_timestamp_ms=1_700_000_000_000,
    )
    fields.update(overrides)
    return TransactionLogValue(**fields)


def test_key_round_trip_and_layout():
    raw = encode_key("app-1")
    assert raw == struct.pack(">hh", 0, 5) + b"app-1"  # version 0, int16-length string
    assert decode_key(raw) == "app-1"


def test_value_round_trips_in_both_versions():
    value = _value(previous_producer_id=11, next_producer_id=12, client_transaction_version=2)
    assert decode_value(encode_value(value)) == value
    v0 = decode_value(encode_value(value, version=0))
    # v0 has no tagged fields: the KIP-890 fields fall back to their defaults
    assert v0 == _value()


def test_tombstone_is_none():
    assert decode_value(None) is None


def test_empty_state_writes_a_null_partition_array():
    raw = encode_value(_value(transaction_status=0, transaction_partitions=frozenset()), version=0)
    # version, pid, epoch, timeout, status, then int32 -1 for the null array
    assert raw[2 + 8 + 2 + 4 + 1 :][:4] == struct.pack(">i", -1)
    assert decode_value(raw).transaction_partitions == frozenset()


def test_decodes_a_v0_value_built_by_hand_from_kafkas_schema():
    raw = struct.pack(">h", 0)  # version
    raw += struct.pack(
        ">qhib", 99, 3, 30_000, 2
    )  # ProducerId, ProducerEpoch, TimeoutMs, Status=PrepareCommit
    raw += struct.pack(">i", 1)  # TransactionPartitions: one topic
    raw += struct.pack(">h", 3) + b"out" + struct.pack(">i", 2) + struct.pack(">ii", 0, 5)
    raw += struct.pack(">qq", 2000, 1000)  # LastUpdateTimestampMs, StartTimestampMs
    value = decode_value(raw)
    assert value == TransactionLogValue(
        producer_id=99,
        producer_epoch=3,
        transaction_timeout_ms=30_000,
        transaction_status=2,
        transaction_partitions=frozenset({("out", 0), ("out", 5)}),
        transaction_last_update_timestamp_ms=2000,
        transaction_start_timestamp_ms=1000,
    )


def test_decodes_a_v1_flexible_value_built_by_hand_with_tagged_fields():
    raw = struct.pack(">h", 1)
    raw += struct.pack(">qhib", 500, 0, 60_000, 4)  # CompleteCommit
    raw += bytes([2])  # compact array: 1 element (n + 1)
    raw += bytes([4]) + b"abc"  # compact string (len + 1)
    raw += bytes([2]) + struct.pack(">i", 7)  # compact int32 array with one entry
    raw += bytes([0])  # the element's tagged fields: none
    raw += struct.pack(">qq", 20, 10)
    raw += bytes([3])  # three tagged fields, ascending tags
    raw += bytes([0, 8]) + struct.pack(">q", 499)  # tag 0 PreviousProducerId
    raw += bytes([1, 8]) + struct.pack(">q", 501)  # tag 1 NextProducerId
    raw += bytes([2, 2]) + struct.pack(">h", 2)  # tag 2 ClientTransactionVersion
    value = decode_value(raw)
    assert value.transaction_partitions == frozenset({("abc", 7)})
    assert (value.previous_producer_id, value.next_producer_id, value.client_transaction_version) == (
        499,
        501,
        2,
    )
    assert value.transaction_status == 4 and value.producer_id == 500
    # and our encoder writes exactly these bytes
    assert encode_value(value) == raw


def test_unknown_tagged_fields_are_skipped():
    value = _value()
    raw = bytearray(encode_value(value))
    assert raw[-1] == 0  # no tagged fields
    raw[-1:] = bytes([1, 9, 2]) + b"zz"  # one unknown tag 9 of 2 bytes
    assert decode_value(bytes(raw)) == value


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_value_is_corrupt(cut):
    raw = encode_value(_value())
    with pytest.raises(CorruptMessage):
        decode_value(raw[:-cut])


def test_unknown_versions_are_corrupt():
    with pytest.raises(CorruptMessage):
        decode_key(struct.pack(">hh", 1, 1) + b"x")
    with pytest.raises(CorruptMessage):
        decode_value(struct.pack(">h", 2) + encode_value(_value())[2:])


@given(
    st.builds(
        TransactionLogValue,
        producer_id=st.integers(0, 2**63 - 1),
        producer_epoch=st.integers(-1, 32767),
        transaction_timeout_ms=st.integers(1, 2**31 - 1),
        transaction_status=st.integers(1, 7),
        transaction_partitions=st.frozensets(
            st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1))
        ),
        transaction_last_update_timestamp_ms=st.integers(-1, 2**62),
        transaction_start_timestamp_ms=st.integers(-1, 2**62),
        previous_producer_id=st.integers(-1, 2**63 - 1),
        next_producer_id=st.integers(-1, 2**63 - 1),
        client_transaction_version=st.integers(0, 2),
    )
)
def test_any_value_round_trips(value):
    assert decode_value(encode_value(value)) == value
