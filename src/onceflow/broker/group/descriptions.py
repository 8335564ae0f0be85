"""What DescribeGroups and ListGroups show of a group, of either protocol."""

from __future__ import annotations

import dataclasses

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from onceflow.broker.group.consumer_group import ConsumerGroup
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.state import GroupState
from onceflow.protocol.errors import ErrorCode


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer": a group of the KIP-848 protocol


def not_found(group_id: str) -> GroupDescription:
    return GroupDescription(ErrorCode.GROUP_ID_NOT_FOUND, group_id, GroupState.DEAD.kafka_name, "", "")


def describe_classic_group(group: GroupMetadata) -> GroupDescription:
    """Members' metadata and assignments are shown only once the group is Stable (Kafka's rule)."""
    members = []
    stable = group.is_in(GroupState.STABLE)
    for m in group.members.values():
        metadata = m.metadata_for(group.protocol_name) if stable and group.protocol_name else b""
        members.append(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                metadata,
                m.assignment if stable else b"",
            )
        )
    return GroupDescription(
        ErrorCode.NONE,
        group.group_id,
        group.state.kafka_name,
        group.protocol_type or "",
        (group.protocol_name or "") if stable else "",
        tuple(members),
    )


def describe_consumer_group(group: ConsumerGroup) -> GroupDescription:
    """DescribeGroups of a consumer-protocol group, in the classic form Kafka gives it: protocol type
    "consumer", no protocol name, each member's subscription and current assignment encoded as the
    classic ConsumerProtocol bytes, so that tools written for classic groups show them."""
    members = []
    for m in group.members.values():
        subscription = ConsumerProtocolSubscription(
            topics=sorted(m.subscribed_topic_names), user_data=None, owned_partitions=[], generation_id=-1
        )
        assigned = ConsumerProtocolAssignment(
            assigned_partitions=[
                ConsumerProtocolAssignment.TopicPartition(topic=name, partitions=sorted(parts))
                for topic_id, parts in sorted(m.assignment.assigned.items())
                if (name := group.topic_name(topic_id)) is not None
            ],
            user_data=None,
        )
        members.append(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                bytes(subscription.encode(version=0)),
                bytes(assigned.encode(version=0)),
            )
        )
    return GroupDescription(ErrorCode.NONE, group.group_id, group.state.value, "consumer", "", tuple(members))
