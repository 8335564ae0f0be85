"""Records of ``__consumer_offsets``, in Kafka's own key and value schemas.

Keys start with an int16 version that says what the record is: 0 or 1 an offset commit
(``OffsetCommitKey``: group, topic, partition), 2 a group's metadata (``GroupMetadataKey``: group),
3-8 a record of a consumer-protocol group (:mod:`consumer_group_records`).
We write ``OffsetCommitKey`` v1 / ``OffsetCommitValue`` v3 and ``GroupMetadataKey`` v2 /
``GroupMetadataValue`` v3, the versions a Kafka 3.x broker writes, so ``dump-log`` output and
operators' tools read the same thing they would from Kafka. A deletion is the key with a null value
(a tombstone). Reading accepts every version 0-4 (4 is the flexible, compact encoding).
"""

from __future__ import annotations

import dataclasses
import functools
import struct

from onceflow.broker.coordinator.partitioning import java_string_hash, partition_for_key
from onceflow.broker.group import consumer_group_records as cg
from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter

_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSION = 3
_GROUP_VALUE_VERSION = 3


# Kafka's hash of a group id onto a partition, under the names this module always had.
java_string_hashcode = java_string_hash
partition_for_group = partition_for_key


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only OffsetCommitValue v1 carries one


@dataclasses.dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


# ---------------------------------------------------------------------------------------------
# writing (every version we write is non-flexible)


def encode_offset_key(key: OffsetKey) -> bytes:
    w = SchemaWriter()
    w.int16(_OFFSET_KEY_VERSION)
    w.string(key.group_id)
    w.string(key.topic)
    w.int32(key.partition)
    return w.done()


def encode_group_key(key: GroupKey) -> bytes:
    w = SchemaWriter()
    w.int16(_GROUP_KEY_VERSION)
    w.string(key.group_id)
    return w.done()


def encode_offset_value(value: OffsetValue) -> bytes:
    w = SchemaWriter()
    w.int16(_OFFSET_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    return w.done()


def encode_group_value(value: GroupValue) -> bytes:
    w = SchemaWriter()
    w.int16(_GROUP_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


# ---------------------------------------------------------------------------------------------
# reading


# Every record the coordinator writes is replayed, and the same few keys (a group's partitions) come
# again and again: remember the answers (keys are immutable; bounded, so distinct keys cannot grow it).
@functools.lru_cache(maxsize=65536)
def decode_key(raw: bytes) -> OffsetKey | GroupKey | cg.ConsumerGroupKey:
    """Versions 3-8 are records of consumer-protocol groups (:mod:`consumer_group_records`)."""
    r = SchemaReader(raw, CONSUMER_OFFSETS_TOPIC)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupKey(r.string())
    if version in cg.RECORD_TYPES:
        return cg.decode_key(r, version)
    raise CorruptMessage(f"unknown __consumer_offsets key version {version}")


_OFFSET_V3_HEAD = struct.Struct(">hqih")  # version 3, offset, leader epoch, metadata length
_INT64 = struct.Struct(">q")


def decode_offset_value(raw: bytes) -> OffsetValue:
    # The version we write, read without the general reader (every commit is replayed).
    if len(raw) >= _OFFSET_V3_HEAD.size and raw[:2] == b"\x00\x03":
        _version, offset, leader_epoch, length = _OFFSET_V3_HEAD.unpack_from(raw)
        start = _OFFSET_V3_HEAD.size
        if length >= 0 and len(raw) == start + length + 8:
            try:
                metadata = raw[start : start + length].decode()
            except UnicodeDecodeError:
                pass  # the general reader names the problem
            else:
                (commit_ts,) = _INT64.unpack_from(raw, start + length)
                return OffsetValue(offset, leader_epoch, metadata, commit_ts, -1)
    r = SchemaReader(raw, CONSUMER_OFFSETS_TOPIC)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CorruptMessage(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.tagged_fields()
    return OffsetValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(raw: bytes) -> GroupValue:
    r = SchemaReader(raw, CONSUMER_OFFSETS_TOPIC)
    version = r.int16()
    if not 0 <= version <= 4:
        raise CorruptMessage(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout = 0
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both, as Kafka reads it
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
