"""Metadata records: Kafka's frame and bodies, every version of every record, and bad bytes."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.metadata import records as r
from onceflow.metadata.schema import specs
from onceflow.protocol.errors import CorruptMessage

_SIMPLE = {
    "int8": st.integers(-128, 127),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "bool": st.booleans(),
    "float64": st.floats(allow_nan=False),
    "uuid": st.uuids(),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=20),
}


def _value(spec, version):
    kind = spec.kind
    if kind.startswith("[]"):
        inner = kind[2:]
        element = _struct_values(spec.struct, version) if inner == "struct" else _SIMPLE[inner]
        values = st.lists(element, max_size=4).map(tuple)
    elif kind == "struct":
        values = _struct_values(spec.struct, version)
    else:
        values = _SIMPLE[kind]
    return st.one_of(st.none(), values) if spec.nullable_in(version) else values


def _struct_values(cls, version):
    fields = {name: _value(spec, version) for name, spec in specs(cls) if spec.present(version)}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


_CASES = [
    (cls, v) for cls in r.ALL_RECORD_CLASSES for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]


@pytest.mark.parametrize(("cls", "version"), _CASES, ids=[f"{c.__name__}-v{v}" for c, v in _CASES])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_record_round_trips_at_every_version(cls, version, data):
    record = data.draw(_struct_values(cls, version))
    encoded = r.to_bytes(record, version)
    decoded, read_version = r.from_bytes_with_version(encoded)
    assert decoded == record
    assert read_version == version
    assert r.to_bytes(decoded, version) == encoded


def test_the_frame_is_kafkas_uvarint_frame_version_api_key_and_version():
    record = r.TopicRecord(name="foo", topic_id=uuid.UUID(int=0x0102))
    data = r.to_bytes(record)
    # frame version 1, api key 2, version 0, compact "foo", the uuid's 16 bytes, no tagged fields
    assert data == bytes([1, 2, 0, 4]) + b"foo" + uuid.UUID(int=0x0102).bytes + b"\x00"


def test_feature_level_record_bytes_are_kafkas():
    # What Kafka's storage tool writes first into a new __cluster_metadata log (metadata.version 20),
    # spelled out field by field from FeatureLevelRecord.json.
    data = bytes.fromhex("010c0011" + b"metadata.version".hex() + "001400")
    assert r.from_bytes(data) == r.FeatureLevelRecord(name="metadata.version", feature_level=20)
    assert r.to_bytes(r.FeatureLevelRecord(name="metadata.version", feature_level=20)) == data


def test_partition_record_v0_and_v1_bytes_are_kafkas():
    topic_id = uuid.UUID("00000000-0000-4000-8000-000000000086")
    body_v0 = (
        "00000000"
        + topic_id.hex  # partition 0, topic id
        + "02"
        "00000001"  # replicas [1]
         + "02"
        "00000001"  # isr [1]
         + "01"
        "01"  # removing, adding: empty compact arrays
         + "00000001"
        "00000000"
        "00000000"  # leader 1, leader epoch 0, partition epoch 0
    )
    expected = r.PartitionRecord(
        partition_id=0,
        topic_id=topic_id,
        replicas=(1,),
        isr=(1,),
        leader=1,
        leader_epoch=0,
        partition_epoch=0,
    )
    v0 = bytes.fromhex("010300" + body_v0 + "00")
    assert r.from_bytes(v0) == expected
    assert r.to_bytes(expected) == v0
    # v1 (Kafka 3.7+, JBOD) adds the directory of each replica before the tagged fields.
    directory = uuid.UUID("10000000-0000-4000-8000-000000000001")
    v1 = bytes.fromhex("010301" + body_v0 + "02" + directory.hex + "00")
    assert r.from_bytes(v1) == dataclasses.replace(expected, directories=(directory,))


def test_tagged_fields_are_written_only_when_not_default():
    topic_id = uuid.UUID(int=9)
    leader_only = r.PartitionChangeRecord(partition_id=1, topic_id=topic_id, leader=3)
    data = r.to_bytes(leader_only)
    # one tagged field: tag 1 (Leader), 4 bytes
    assert data.endswith(bytes([1, 1, 4]) + (3).to_bytes(4, "big"))
    assert r.from_bytes(data).isr is None


def test_a_value_the_version_cannot_carry_is_refused():
    record = r.RegisterBrokerRecord(
        broker_id=1, incarnation_id=uuid.UUID(int=1), broker_epoch=5, in_controlled_shutdown=True
    )
    with pytest.raises(ValueError, match="in_controlled_shutdown"):
        r.to_bytes(record, 0)
    assert r.from_bytes(r.to_bytes(record, 1)) == record


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes([0, 2, 0]), "frame version 0"),
        (bytes([15]), "frame version 15"),
        (bytes([0x80] * 6), "frame version"),
        (bytes([1, 0x80, 0x80, 0x80, 0x80, 0x80]), "type"),
        (bytes([1, 8, 0xFF, 0xFF, 0xFF, 0x7F]), "too large"),
        (bytes([1, 0xFF, 0x7F, 0]), "unknown metadata record type"),
        (bytes([1, 0, 0, 0x80]), "truncated"),
        (bytes([1, 2, 5]) + b"\x00" * 20, "version 5"),
        (r.to_bytes(r.NoOpRecord()) + b"\x00", "garbage"),
    ],
)
def test_bad_bytes_are_a_clear_corrupt_message(data, message):
    with pytest.raises(CorruptMessage, match=message):
        r.from_bytes(data)


def test_a_null_where_the_schema_forbids_one_is_refused():
    # TopicRecord.name is not nullable: a compact length of 0 means null
    data = bytes([1, 2, 0, 0]) + uuid.UUID(int=1).bytes + b"\x00"
    with pytest.raises(CorruptMessage, match="null"):
        r.from_bytes(data)


def test_unknown_tagged_fields_are_skipped():
    known = r.to_bytes(r.TopicRecord(name="t", topic_id=uuid.UUID(int=1)))
    # replace the empty tagged-field trailer by one unknown tag (7) of 2 bytes
    with_unknown = known[:-1] + bytes([1, 7, 2, 0xAB, 0xCD])
    assert r.from_bytes(with_unknown) == r.from_bytes(known)


def test_api_keys_are_kafkas():
    keys = {cls.__name__: cls.API_KEY for cls in r.ALL_RECORD_CLASSES}
    assert keys == {
        "RegisterBrokerRecord": 0,
        "UnregisterBrokerRecord": 1,
        "TopicRecord": 2,
        "PartitionRecord": 3,
        "ConfigRecord": 4,
        "PartitionChangeRecord": 5,
        "FenceBrokerRecord": 7,
        "UnfenceBrokerRecord": 8,
        "RemoveTopicRecord": 9,
        "FeatureLevelRecord": 12,
        "ClientQuotaRecord": 14,
        "ProducerIdsRecord": 15,
        "UserScramCredentialRecord": 11,
        "BrokerRegistrationChangeRecord": 17,
        "AccessControlEntryRecord": 18,
        "RemoveAccessControlEntryRecord": 19,
        "NoOpRecord": 20,
        "RemoveUserScramCredentialRecord": 22,
    }


def test_scram_and_acl_record_bytes_are_kafkas():
    # Hand-made from Kafka's JSON schemas: frame version 1, api key, version 0, compact fields, no tags.
    scram = r.UserScramCredentialRecord(
        name="al", mechanism=2, salt=b"\x01\x02", stored_key=b"\x03", server_key=b"", iterations=4096
    )
    assert r.to_bytes(scram) == bytes.fromhex("010b0003616c020301020203010000100000")
    acl = r.AccessControlEntryRecord(
        id=uuid.UUID(int=1),
        resource_type=2,
        resource_name="t",
        pattern_type=3,
        principal="User:a",
        host="*",
        operation=3,
        permission_type=3,
    )
    expected = (
        "011200"
        + "00" * 15
        + "01"
        + "02"
        + "0274"
        + "03"
        + "07"
        + b"User:a".hex()
        + "022a"
        + "03"
        + "03"
        + "00"
    )
    assert r.to_bytes(acl) == bytes.fromhex(expected)
    assert r.from_bytes(r.to_bytes(acl)) == acl
