"""OffsetDelete (47): drop a group's committed offsets for partitions no live member subscribes to.
Needs DELETE on the group (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else its
partitions are TOPIC_AUTHORIZATION_FAILED and kept)."""

from __future__ import annotations

from kafka.protocol.consumer.group import OffsetDeleteRequest, OffsetDeleteResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DELETE, GROUP, READ, TOPIC, allowed_names, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = OffsetDeleteRequest

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics or [] for p in t.partitions or []]
    readable = allowed_names(ctx, READ, TOPIC, (t for t, _ in wanted))
    denied = {
        tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for tp in wanted
        if readable is not None and tp[0] not in readable
    }
    if not authorize(ctx, DELETE, GROUP, request.group_id):
        top, per_partition = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    elif denied and len(denied) == len(wanted):
        top, per_partition = ErrorCode.NONE, {}
    else:
        try:
            top, per_partition = await ctx.groups.delete_offsets(
                request.group_id, [tp for tp in wanted if tp not in denied]
            )
        except KafkaError as exc:
            top, per_partition = error_code_for(exc), {}
    per_partition = {**per_partition, **denied}
    if top is not ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=int(top), throttle_time_ms=0, topics=[])
    topics = [
        _Topic(
            name=t.name,
            partitions=[
                _Partition(
                    partition_index=p.partition_index,
                    error_code=int(per_partition[(t.name, p.partition_index)]),
                )
                for p in t.partitions or []
            ],
        )
        for t in request.topics or []
    ]
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)
