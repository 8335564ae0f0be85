import pytest

from onceflow.broker.group import log_format as fmt
from onceflow.protocol.errors import CorruptMessage


def test_java_hashcode_matches_java():
    # Values of String.hashCode() computed by the JVM.
    assert fmt.java_string_hashcode("") == 0
    assert fmt.java_string_hashcode("hello") == 99162322
    assert fmt.java_string_hashcode("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE


def test_partition_for_group_handles_min_value_like_kafka():
    assert fmt.partition_for_group("polygenelubricants", 50) == 0
    assert fmt.partition_for_group("hello", 50) == 99162322 % 50
    assert all(0 <= fmt.partition_for_group(f"g{i}", 7) < 7 for i in range(100))


def test_offset_key_and_value_round_trip_in_kafka_layout():
    key = fmt.OffsetKey("grp", "topic", 3)
    raw = fmt.encode_offset_key(key)
    # int16 version 1, string group, string topic, int32 partition
    assert raw == b"\x00\x01" + b"\x00\x03grp" + b"\x00\x05topic" + b"\x00\x00\x00\x03"
    assert fmt.decode_key(raw) == key
    value = fmt.OffsetValue(42, 7, "meta", 1234)
    raw_v = fmt.encode_offset_value(value)
    assert raw_v[:2] == b"\x00\x03"
    assert fmt.decode_offset_value(raw_v) == value


def test_group_value_round_trip():
    member = fmt.MemberRecord("m-1", "inst", "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
    value = fmt.GroupValue("consumer", 5, "range", "m-1", 999, (member,))
    key_raw = fmt.encode_group_key(fmt.GroupKey("grp"))
    assert key_raw[:2] == b"\x00\x02"
    assert fmt.decode_key(key_raw) == fmt.GroupKey("grp")
    assert fmt.decode_group_value(fmt.encode_group_value(value)) == value


def test_empty_group_value_has_null_protocol_and_leader():
    value = fmt.GroupValue("consumer", 2, None, None, 5, ())
    assert fmt.decode_group_value(fmt.encode_group_value(value)) == value


def test_reads_flexible_v4_offset_value():
    # v4: int64 offset, int32 epoch, compact string, int64 ts, empty tagged fields
    raw = (
        b"\x00\x04"
        + (9).to_bytes(8, "big")
        + (1).to_bytes(4, "big")
        + b"\x03ab"
        + (5).to_bytes(8, "big")
        + b"\x00"
    )
    assert fmt.decode_offset_value(raw) == fmt.OffsetValue(9, 1, "ab", 5)


def test_reads_v1_offset_value_with_expire_timestamp():
    raw = (
        b"\x00\x01" + (9).to_bytes(8, "big") + b"\x00\x00" + (5).to_bytes(8, "big") + (77).to_bytes(8, "big")
    )
    assert fmt.decode_offset_value(raw) == fmt.OffsetValue(9, -1, "", 5, 77)


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09abc", b"\x00\x01\x00\x05ab"])
def test_garbage_keys_raise_corrupt_message(raw):
    with pytest.raises(CorruptMessage):
        fmt.decode_key(raw)
