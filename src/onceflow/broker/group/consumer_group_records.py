"""Records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``, in Kafka's schemas.

A key's int16 version is the record type: 3 the group epoch (``ConsumerGroupMetadata``), 5 a member's
subscription (``ConsumerGroupMemberMetadata``), 6 the target assignment's epoch
(``ConsumerGroupTargetAssignmentMetadata``), 7 a member's target assignment
(``ConsumerGroupTargetAssignmentMember``), 8 a member's current assignment and epochs
(``ConsumerGroupCurrentMemberAssignment``); 4, Kafka's subscribed-topic metadata, is read and
ignored (the coordinator recomputes it from the topics). Keys are classic encodings (group id, then
member id for 5, 7 and 8); values are version 0 in the flexible (compact) encoding. A null value is a
tombstone. Member states are Kafka's bytes: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
"""

from __future__ import annotations

import dataclasses
import uuid

from onceflow.broker.group import assignment as a
from onceflow.broker.group.assignment import Assignment
from onceflow.broker.group.reconciliation import MemberAssignment, MemberState
from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter

GROUP_EPOCH = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_EPOCH = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
RECORD_TYPES = frozenset(
    {GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT}
)
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
_WHAT = CONSUMER_OFFSETS_TOPIC  # names the topic in CorruptMessage texts
_STATE_BYTES = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
_STATES = {v: k for k, v in _STATE_BYTES.items()}


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    record_type: int
    group_id: str
    member_id: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


def encode_key(key: ConsumerGroupKey) -> bytes:
    w = SchemaWriter()
    w.int16(key.record_type)
    w.string(key.group_id)
    if key.record_type in _PER_MEMBER:
        w.string(key.member_id or "")
    return w.done()


def decode_key(reader: SchemaReader, record_type: int) -> ConsumerGroupKey:
    """The rest of a key whose version (``record_type``) the caller has read."""
    group_id = reader.string()
    member_id = reader.string() if record_type in _PER_MEMBER else None
    return ConsumerGroupKey(record_type, group_id, member_id)


def _value_writer() -> SchemaWriter:
    w = SchemaWriter(flexible=True)
    w.int16(0)
    return w


def _value_reader(raw: bytes) -> SchemaReader:
    r = SchemaReader(raw, _WHAT, flexible=True)
    version = r.int16()
    if version != 0:
        raise CorruptMessage(f"unknown consumer group record value version {version}")
    return r


def _finish(w: SchemaWriter) -> bytes:
    w.tagged_fields([])
    return w.done()


def _write_partitions(w: SchemaWriter, parts: Assignment) -> None:
    w.array_len(len(parts))
    for topic_id, partitions in sorted(parts.items()):
        w.uuid(topic_id)
        w.array_len(len(partitions))
        for p in sorted(partitions):
            w.int32(p)
        w.tagged_fields([])


def _read_partitions(r: SchemaReader) -> dict[uuid.UUID, frozenset[int]]:
    parts = {}
    for _ in range(r.array_len()):
        topic_id = r.uuid()
        parts[topic_id] = frozenset(r.int32() for _ in range(r.array_len()))
        r.tagged_fields()
    return a.normalize(parts)


def encode_epoch(epoch: int) -> bytes:
    """The value of a group epoch (3) or target assignment epoch (6) record."""
    w = _value_writer()
    w.int32(epoch)
    return _finish(w)


def decode_epoch(raw: bytes) -> int:
    return _value_reader(raw).int32()


def encode_member_metadata(m: MemberMetadata) -> bytes:
    w = _value_writer()
    w.string(m.instance_id)
    w.string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.array_len(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.string(name)
    w.string(m.subscribed_topic_regex)
    w.int32(m.rebalance_timeout_ms)
    w.string(m.server_assignor)
    return _finish(w)


def decode_member_metadata(raw: bytes) -> MemberMetadata:
    r = _value_reader(raw)
    instance_id, rack_id, client_id, client_host = (
        r.nullable_string(),
        r.nullable_string(),
        r.string(),
        r.string(),
    )
    names = tuple(r.string() for _ in range(r.array_len()))
    return MemberMetadata(
        instance_id,
        rack_id,
        client_id,
        client_host,
        names,
        r.nullable_string(),
        r.int32(),
        r.nullable_string(),
    )


def encode_target_member(parts: Assignment) -> bytes:
    w = _value_writer()
    _write_partitions(w, parts)
    return _finish(w)


def decode_target_member(raw: bytes) -> dict[uuid.UUID, frozenset[int]]:
    return _read_partitions(_value_reader(raw))


def encode_current_assignment(m: MemberAssignment) -> bytes:
    w = _value_writer()
    w.int32(m.epoch)
    w.int32(m.previous_epoch)
    w.int8(_STATE_BYTES[m.state])
    _write_partitions(w, m.assigned)
    _write_partitions(w, m.pending_revocation)
    return _finish(w)


def decode_current_assignment(raw: bytes) -> MemberAssignment:
    r = _value_reader(raw)
    epoch, previous, state = r.int32(), r.int32(), r.int8()
    if state not in _STATES:
        raise CorruptMessage(f"unknown consumer group member state {state}")
    return MemberAssignment(_STATES[state], epoch, previous, _read_partitions(r), _read_partitions(r))
