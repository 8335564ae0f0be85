"""``encode_value`` packs fields with structs and caches the partition array; these check its bytes
against a field-by-field encoder of Kafka's TransactionLogValue schema written here (versions 0 and 1),
and that the cached partition bytes never leak between versions or partition sets."""

import struct

from hypothesis import given
from hypothesis import strategies as st

from onceflow.broker.txn.log_format import (
    TransactionLogValue,
    decode_value,
    encode_value,
    encode_value_fields,
)
from onceflow.protocol.schema_io import SchemaWriter


def _reference_encode(value: TransactionLogValue, version: int) -> bytes:
    w = SchemaWriter()
    w.int16(version)
    w.flexible = version >= 1
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.transaction_timeout_ms)
    w.int8(value.transaction_status)
    if value.transaction_status == 0:
        w.array_len(None)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.transaction_partitions):
            by_topic.setdefault(topic, []).append(partition)
        w.array_len(len(by_topic))
        for topic, ids in by_topic.items():
            w.string(topic)
            w.array_len(len(ids))
            for partition in ids:
                w.int32(partition)
            if w.flexible:
                w.tagged_fields([])
    w.int64(value.transaction_last_update_timestamp_ms)
    w.int64(value.transaction_start_timestamp_ms)
    if w.flexible:
        tags = []
        if value.previous_producer_id != -1:
            tags.append((0, struct.pack(">q", value.previous_producer_id)))
        if value.next_producer_id != -1:
            tags.append((1, struct.pack(">q", value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append((2, struct.pack(">h", value.client_transaction_version)))
        w.tagged_fields(tags)
    return w.done()


values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(-1, 32767),
    transaction_timeout_ms=st.integers(1, 2**31 - 1),
    transaction_status=st.integers(0, 7),
    transaction_partitions=st.frozensets(
        st.tuples(st.sampled_from(["a", "orders", "ü-topic", "t" * 200]), st.integers(0, 2**31 - 1)),
        max_size=6,
    ),
    transaction_last_update_timestamp_ms=st.integers(-1, 2**62),
    transaction_start_timestamp_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    client_transaction_version=st.integers(0, 2),
)


@given(values, st.sampled_from([0, 1]))
def test_same_bytes_as_the_field_by_field_encoder(value, version):
    assert encode_value(value, version) == _reference_encode(value, version)


def test_the_same_partitions_encode_per_version_and_status():
    partitions = frozenset({("orders", 1), ("orders", 0)})
    ongoing = TransactionLogValue(1, 0, 1000, 1, partitions, 5, 4)
    empty = TransactionLogValue(1, 0, 1000, 0, partitions, 5, 4)
    for version in (0, 1, 0):  # the cache is keyed by version too
        assert encode_value(ongoing, version) == _reference_encode(ongoing, version)
        assert encode_value(empty, version) == _reference_encode(empty, version)
    assert decode_value(encode_value(empty)).transaction_partitions == frozenset()
    assert decode_value(encode_value(ongoing)).transaction_partitions == partitions


def test_fields_form_equals_the_value_form():
    value = TransactionLogValue(9, 2, 60_000, 2, frozenset({("t", 0)}), 7, 6, 3, 4, 2)
    assert encode_value_fields(9, 2, 60_000, 2, frozenset({("t", 0)}), 7, 6, 3, 4, 2) == encode_value(value)
