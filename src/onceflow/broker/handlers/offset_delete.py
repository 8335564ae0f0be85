"""OffsetDelete (47): drop a group's committed offsets for partitions no live member subscribes to."""

from __future__ import annotations

from kafka.protocol.consumer.group import OffsetDeleteRequest, OffsetDeleteResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = OffsetDeleteRequest

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics or [] for p in t.partitions or []]
    try:
        top, per_partition = await ctx.groups.delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        top, per_partition = error_code_for(exc), {}
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
