"""ConsumerGroupHeartbeat (68): the consumer group protocol of KIP-848. One request joins, heartbeats,
acknowledges revocations and leaves; the answer carries the member's epoch and, when it changed, its
assignment (topic ids and partitions). v1 (KIP-1082): the client names itself, so MemberId is never
empty; v1 also adds a subscription regular expression. Needs READ on the group, else
GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from onceflow.broker.context import RequestContext
from onceflow.broker.group import assignment as a
from onceflow.broker.group.consumer_group import HeartbeatRequest
from onceflow.broker.group.handler_support import client_host
from onceflow.broker.security.access import GROUP, READ, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = ConsumerGroupHeartbeatRequest

_Assignment = ConsumerGroupHeartbeatResponse.Assignment
_TopicPartitions = _Assignment.TopicPartitions


def _request(ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> HeartbeatRequest:
    owned = None
    if request.topic_partitions is not None:
        owned = a.from_pairs((t.topic_id, p) for t in request.topic_partitions for p in t.partitions or [])
    names = request.subscribed_topic_names
    return HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
        api_version=ctx.api_version,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
    )


def _error(code: ErrorCode, message: str | None) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=int(code),
        error_message=message,
        member_id=None,
        member_epoch=-1,
        heartbeat_interval_ms=0,
        assignment=None,
    )


async def handle(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    if not authorize(ctx, READ, GROUP, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    try:
        result = await ctx.groups.consumer_group_heartbeat(_request(ctx, request))
    except KafkaError as exc:
        return _error(error_code_for(exc), str(exc))
    assignment = None
    if result.assignment is not None:
        assignment = _Assignment(
            topic_partitions=[
                _TopicPartitions(topic_id=topic, partitions=sorted(parts))
                for topic, parts in sorted(result.assignment.items())
            ]
        )
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )
