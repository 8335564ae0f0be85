"""OffsetCommit (8): store a group's consumed positions in ``__consumer_offsets``; acknowledged once
the append is committed (a failed one: NOT_COORDINATOR, retriable). v10 names topics by id only and
is not offered. The version goes to the coordinator: a
member of a consumer-protocol group (KIP-848) must commit with v9, which carries its member epoch, and
is answered UNSUPPORTED_VERSION below it; a commit with a generation to a group that does not exist
is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION below (Kafka's rules). Needs READ on the group
(else every partition is GROUP_AUTHORIZATION_FAILED) and on each topic (else its partitions are
TOPIC_AUTHORIZATION_FAILED and not committed)."""

from __future__ import annotations

from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetCommitResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.group.handler_support import offset_commit_topics, requested_offsets
from onceflow.broker.security.access import GROUP, READ, TOPIC, allowed_names, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9
REQUEST = OffsetCommitRequest

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    v = ctx.api_version
    offsets = requested_offsets(request, with_leader_epoch=v >= 6)
    top = ErrorCode.NONE
    per_partition: dict = {}
    readable = allowed_names(ctx, READ, TOPIC, (t.name for t in request.topics or []))
    denied = {}
    if readable is not None:
        denied = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in offsets if tp[0] not in readable}
        offsets = {tp: entry for tp, entry in offsets.items() if tp not in denied}
    if not authorize(ctx, READ, GROUP, request.group_id):
        top = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif denied and not offsets:
        per_partition = denied
    else:
        try:
            top, per_partition = await ctx.groups.commit_offsets(
                request.group_id,
                request.member_id if v >= 1 else "",
                request.group_instance_id if v >= 7 else None,
                request.generation_id_or_member_epoch if v >= 1 else -1,
                offsets,
                api_version=v,
            )
        except KafkaError as exc:
            top = error_code_for(exc)
        per_partition = {**per_partition, **denied}
    topics = offset_commit_topics(request, top, per_partition, _Topic, _Partition)
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)
