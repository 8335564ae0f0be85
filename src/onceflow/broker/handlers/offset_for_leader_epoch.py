"""OffsetForLeaderEpoch (23): where a leader epoch ended in this leader's log (KIP-101, KIP-320).

A follower asks it to find where its log parts from the leader's; a consumer asks it after a leader
change to check that the records before its position are still there. The answer is the largest epoch
at or below the one asked for and the offset where it ended (the next epoch's start, or the log end
for the current epoch); -1/-1 when the log knows no such epoch. The request's current leader epoch is
checked as everywhere (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), and only the leader answers
(NOT_LEADER_OR_FOLLOWER), as Kafka's.
"""

from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.replica.partition import leader_epoch_error
from onceflow.broker.security.access import DESCRIBE, TOPIC, allowed_names
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4
REQUEST = OffsetForLeaderEpochRequest

_Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_Partition = _Topic.EpochEndOffset


def _answer(ctx: RequestContext, topic: str, wanted) -> _Partition:
    def failed(code: ErrorCode) -> _Partition:
        return _Partition(error_code=int(code), partition=wanted.partition, leader_epoch=-1, end_offset=-1)

    try:
        partition = ctx.topics.get_partition(topic, wanted.partition)
    except KafkaError as exc:
        return failed(error_code_for(exc))
    replica = getattr(partition, "replica", None)
    if replica is not None:
        error, epoch, end = replica.last_offset_for_leader_epoch(
            wanted.current_leader_epoch, wanted.leader_epoch, require_leader=True
        )
        if error:
            return failed(error)
        return _Partition(error_code=0, partition=wanted.partition, leader_epoch=epoch, end_offset=end)
    error = leader_epoch_error(wanted.current_leader_epoch, getattr(partition, "leader_epoch", 0))
    if error:
        return failed(error)
    found = partition.log.end_offset_for_epoch(wanted.leader_epoch)
    epoch, end = found if found is not None else (-1, -1)
    return _Partition(error_code=0, partition=wanted.partition, leader_epoch=epoch, end_offset=end)


def _denied(wanted) -> _Partition:
    return _Partition(
        error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        partition=wanted.partition,
        leader_epoch=-1,
        end_offset=-1,
    )


async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    # A consumer validating its position needs DESCRIBE on the topic (Kafka's rule for consumers).
    described = allowed_names(ctx, DESCRIBE, TOPIC, (t.topic for t in request.topics))
    return OffsetForLeaderEpochResponse(
        throttle_time_ms=0,
        topics=[
            _Topic(
                topic=t.topic,
                partitions=[
                    _denied(p)
                    if described is not None and t.topic not in described
                    else _answer(ctx, t.topic, p)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
