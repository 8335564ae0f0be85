"""OffsetCommit (8): store a group's consumed positions in ``__consumer_offsets``; acknowledged after
the append. v10 names topics by id only and is not offered."""

from __future__ import annotations

from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetCommitResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.group.coordinator import OffsetCommitEntry
from onceflow.broker.group.handler_support import no_coordinator
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9
REQUEST = OffsetCommitRequest

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    v = ctx.api_version
    offsets = {
        (t.name, p.partition_index): OffsetCommitEntry(
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
            metadata=p.committed_metadata,
        )
        for t in request.topics or []
        for p in t.partitions or []
    }
    top = ErrorCode.NONE
    per_partition: dict = {}
    if no_coordinator(ctx):
        top = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        try:
            top, per_partition = ctx.groups.commit_offsets(
                request.group_id,
                request.member_id if v >= 1 else "",
                request.group_instance_id if v >= 7 else None,
                request.generation_id_or_member_epoch if v >= 1 else -1,
                offsets,
            )
        except KafkaError as exc:
            top = error_code_for(exc)
    topics = [
        _Topic(
            name=t.name,
            partitions=[
                _Partition(
                    partition_index=p.partition_index,
                    error_code=int(
                        top
                        if top is not ErrorCode.NONE
                        else per_partition.get((t.name, p.partition_index), ErrorCode.NONE)
                    ),
                )
                for p in t.partitions or []
            ],
        )
        for t in request.topics or []
    ]
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)
