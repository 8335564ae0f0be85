"""ConsumerGroupDescribe (69): consumer-protocol groups (KIP-848) with their epochs, assignor, and each
member's subscription, current and target assignment. Each group needs DESCRIBE, else
GROUP_AUTHORIZATION_FAILED. A classic or unknown group answers
GROUP_ID_NOT_FOUND (Kafka's answer; clients then use DescribeGroups). Asked for, a described group's
authorized operations are all a group supports (there is no authorizer), as in DescribeGroups.

v1 (KIP-1099) only adds each member's type to the answer (the request is v0's): every member of
these groups uses the consumer protocol (1); we have no classic members inside them (0)."""

from __future__ import annotations

from onceflow.broker import authorized_operations
from onceflow.broker.context import RequestContext
from onceflow.broker.group.assignment import Assignment
from onceflow.broker.group.consumer_group import ConsumerGroup
from onceflow.broker.security.access import DESCRIBE, GROUP, authorize, operations
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = ConsumerGroupDescribeRequest

_Group = ConsumerGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions
NOT_INCLUDED = authorized_operations.NOT_REQUESTED
CONSUMER_MEMBER = 1  # MemberType (v1): -1 unknown, 0 classic, 1 consumer


def _assignment(group: ConsumerGroup, parts: Assignment) -> _Assignment:
    return _Assignment(
        topic_partitions=[
            _TopicPartitions(
                topic_id=topic_id, topic_name=group.topic_name(topic_id) or "", partitions=sorted(ps)
            )
            for topic_id, ps in sorted(parts.items())
        ]
    )


def _describe(group: ConsumerGroup, with_operations: bool, allowed=authorized_operations.GROUP) -> _Group:
    members = [
        _Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.assignment.epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_assignment(group, m.assignment.assigned),
            target_assignment=_assignment(group, group.target.get(m.member_id, {})),
            member_type=CONSUMER_MEMBER,
        )
        for m in group.members.values()
    ]
    return _Group(
        error_code=0,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.epoch,
        assignment_epoch=group.target_epoch,
        assignor_name=group.assignor,
        members=members,
        authorized_operations=authorized_operations.bitfield(allowed, with_operations),
    )


def _failed(group_id: str, code: ErrorCode, message: str | None) -> _Group:
    return _Group(
        error_code=int(code),
        error_message=message,
        group_id=group_id,
        group_state="Dead",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=[],
        authorized_operations=NOT_INCLUDED,
    )


async def handle(ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    groups = []
    for group_id in request.group_ids or []:
        if not authorize(ctx, DESCRIBE, GROUP, group_id):
            groups.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        try:
            group = await ctx.groups.consumer_group(group_id)
        except KafkaError as exc:
            groups.append(_failed(group_id, error_code_for(exc), str(exc)))
            continue
        with_operations = bool(request.include_authorized_operations)
        allowed = operations(ctx, GROUP, group_id) if with_operations else frozenset()
        groups.append(_describe(group, with_operations, allowed))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)
