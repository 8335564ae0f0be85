"""OffsetFetch (9): committed offsets of one group (v0-7) or many (v8+), all partitions when the
topic list is null; ``require_stable`` (v7+) turns partitions with a pending transactional commit into
UNSTABLE_OFFSET_COMMIT. v10 names topics by id only and is not offered. Each group needs DESCRIBE
(else GROUP_AUTHORIZATION_FAILED); offsets of topics without DESCRIBE are TOPIC_AUTHORIZATION_FAILED
when asked for by name, and left out when all are asked for (Kafka's rules)."""

from __future__ import annotations

from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DESCRIBE, GROUP, TOPIC, allowed_names, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9
REQUEST = OffsetFetchRequest

_OldTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_OldPartition = _OldTopic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_NewTopic = _Group.OffsetFetchResponseTopics
_NewPartition = _NewTopic.OffsetFetchResponsePartitions


async def _fetch(
    ctx: RequestContext,
    group_id: str,
    topics,
    require_stable: bool,
    member_id: str | None = None,
    member_epoch: int = -1,
):
    """(group error, {topic: [(partition, offset, epoch, metadata, error)]}) keeping request order.
    ``member_id``/``member_epoch`` (v9) are checked for consumer-protocol groups."""
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes or []]
    if not authorize(ctx, DESCRIBE, GROUP, group_id):
        top = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return top, _failed_rows(wanted, top)
    described = None
    if wanted is not None:
        described = allowed_names(ctx, DESCRIBE, TOPIC, (t for t, _ in wanted))
    denied = [tp for tp in wanted or () if described is not None and tp[0] not in described]
    try:
        asked = [tp for tp in wanted if tp not in denied] if wanted is not None else None
        top, rows = await ctx.groups.fetch_offsets(
            group_id, asked, require_stable=require_stable, member_id=member_id, member_epoch=member_epoch
        )
    except KafkaError as exc:
        top, rows = error_code_for(exc), []
    if wanted is None and top is ErrorCode.NONE:
        visible = allowed_names(ctx, DESCRIBE, TOPIC, {tp[0] for tp, _, _ in rows}, log_denied=False)
        if visible is not None:
            rows = [row for row in rows if row[0][0] in visible]
    by_topic: dict[str, list] = {}
    if top is not ErrorCode.NONE and wanted is not None:
        return top, _failed_rows(wanted, top)
    if denied:  # in request order, the denied ones where they were asked for
        found = {row[0]: row for row in rows}
        rows = [found.get(tp) or (tp, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in wanted]
    for (topic, partition), value, error in rows:
        by_topic.setdefault(topic, []).append(
            (
                partition,
                value.offset if value else -1,
                value.leader_epoch if value else -1,
                value.metadata if value else "",
                error,
            )
        )
    return top, by_topic


def _failed_rows(wanted, code: ErrorCode) -> dict[str, list]:
    by_topic: dict[str, list] = {}
    for topic, partition in wanted or ():
        by_topic.setdefault(topic, []).append((partition, -1, -1, "", code))
    return by_topic


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.api_version
    require_stable = bool(request.require_stable) if v >= 7 else False
    if v >= 8:
        groups = []
        for g in request.groups or []:
            member = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)
            top, by_topic = await _fetch(ctx, g.group_id, g.topics, require_stable, *member)
            groups.append(
                _Group(
                    group_id=g.group_id,
                    error_code=int(top),
                    topics=[
                        _NewTopic(
                            name=name,
                            partitions=[
                                _NewPartition(
                                    partition_index=p,
                                    committed_offset=o,
                                    committed_leader_epoch=e,
                                    metadata=m,
                                    error_code=int(err),
                                )
                                for p, o, e, m, err in rows
                            ],
                        )
                        for name, rows in by_topic.items()
                    ],
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    top, by_topic = await _fetch(ctx, request.group_id, request.topics, require_stable)
    topics = [
        _OldTopic(
            name=name,
            partitions=[
                _OldPartition(
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=e,
                    metadata=m,
                    # v0-1 have no group-level error: it goes into each partition.
                    error_code=int(err if v >= 2 or top is ErrorCode.NONE else top),
                )
                for p, o, e, m, err in rows
            ],
        )
        for name, rows in by_topic.items()
    ]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=int(top))
