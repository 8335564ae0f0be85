"""The replication requests on the wire: the fetcher's requests as Kafka messages and the answers back
(follower side), and a follower's Fetch as the replica manager takes it (leader side).

- Fetch, as a follower sends it (Kafka's ``ReplicaFetcherThread``): the replica id and broker epoch
  (``ReplicaState`` from v15, ``ReplicaId`` before), each partition's current leader epoch and last
  fetched epoch, no fetch session (session id 0, epoch -1: a full fetch each time), topic ids from
  v13 (the names before). The answer's ``DivergingEpoch`` (v12+) becomes ``FetchAnswer.diverging_epoch``.
- OffsetsForLeaderEpoch v3+ with the follower's id as ``ReplicaId``.
- ListOffsets (earliest, -2, and latest, -1, as a replica: the leader's log start and log end).

Pure functions over kafka-python's message classes; the asyncio side sends them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from onceflow.broker.replica.fetcher import (
    EpochEndOffset,
    EpochRequestData,
    FetchRequestData,
    LeaderOffsets,
    LeaderOffsetsRequestData,
)
from onceflow.broker.replica.partition import NO_EPOCH, FetchAnswer, FollowerFetch
from onceflow.protocol.errors import ErrorCode

PartitionKey = tuple[str, int]
EARLIEST = -2
LATEST = -1
NO_SESSION = 0
FULL_FETCH_EPOCH = -1

_FetchTopic = FetchRequest.FetchTopic
_FetchPartition = FetchRequest.FetchTopic.FetchPartition
_PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
_EpochTopic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
_EpochPartition = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition
_OffsetsTopic = ListOffsetsRequest.ListOffsetsTopic
_OffsetsPartition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition


# -- the follower's side -------------------------------------------------------------------------


def fetch_request(data: FetchRequestData, topic_ids: Mapping[str, uuid.UUID | None]) -> FetchRequest:
    """``data`` as a follower's Fetch (any version 12+; fields of other versions are left out)."""
    by_topic: dict[str, list] = {}
    replica_id = replica_epoch = -1
    for (topic, index), fetch in data.partitions.items():
        replica_id, replica_epoch = fetch.replica_id, fetch.replica_epoch
        by_topic.setdefault(topic, []).append(
            _FetchPartition(
                partition=index,
                current_leader_epoch=fetch.current_leader_epoch,
                fetch_offset=fetch.fetch_offset,
                last_fetched_epoch=fetch.last_fetched_epoch,
                log_start_offset=fetch.log_start_offset,
                partition_max_bytes=fetch.max_bytes,
            )
        )
    return FetchRequest(
        replica_id=replica_id,
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch),
        max_wait_ms=data.max_wait_ms,
        min_bytes=data.min_bytes,
        max_bytes=data.max_bytes,
        isolation_level=0,
        session_id=NO_SESSION,
        session_epoch=FULL_FETCH_EPOCH,
        topics=[
            _FetchTopic(topic=topic, topic_id=topic_ids.get(topic), partitions=parts)
            for topic, parts in by_topic.items()
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def fetch_answers(
    response: FetchResponse, topic_names: Mapping[uuid.UUID, str]
) -> dict[PartitionKey, FetchAnswer]:
    """The leader's answer per partition. A request-level error applies to every partition (the caller
    treats partitions with no answer as failed)."""
    answers: dict[PartitionKey, FetchAnswer] = {}
    for topic_response in response.responses:
        topic = topic_response.topic or topic_names.get(topic_response.topic_id, "")
        for p in topic_response.partitions:
            diverging = getattr(p, "diverging_epoch", None)
            epoch = diverging.epoch if diverging is not None else -1
            end = diverging.end_offset if diverging is not None else -1
            answers[(topic, p.partition_index)] = FetchAnswer(
                ErrorCode(p.error_code),
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
                -1,
                bytes(p.records or b""),
                (epoch, end) if epoch >= 0 and end >= 0 else None,
            )
    return answers


def epoch_request(data: EpochRequestData, replica_id: int) -> OffsetForLeaderEpochRequest:
    by_topic: dict[str, list] = {}
    for (topic, index), (current, epoch) in data.partitions.items():
        by_topic.setdefault(topic, []).append(
            _EpochPartition(partition=index, current_leader_epoch=current, leader_epoch=epoch)
        )
    return OffsetForLeaderEpochRequest(
        replica_id=replica_id,
        topics=[_EpochTopic(topic=t, partitions=parts) for t, parts in by_topic.items()],
    )


def epoch_answers(response: OffsetForLeaderEpochResponse) -> dict[PartitionKey, EpochEndOffset]:
    return {
        (t.topic, p.partition): EpochEndOffset(ErrorCode(p.error_code), p.leader_epoch, p.end_offset)
        for t in response.topics
        for p in t.partitions
    }


def leader_offsets_requests(
    data: LeaderOffsetsRequestData, replica_id: int
) -> tuple[ListOffsetsRequest, ListOffsetsRequest]:
    """ListOffsets for the leader's log start and for its log end."""

    def request(timestamp: int) -> ListOffsetsRequest:
        by_topic: dict[str, list] = {}
        for (topic, index), current in data.partitions.items():
            by_topic.setdefault(topic, []).append(
                _OffsetsPartition(partition_index=index, current_leader_epoch=current, timestamp=timestamp)
            )
        return ListOffsetsRequest(
            replica_id=replica_id,
            isolation_level=0,
            topics=[_OffsetsTopic(name=t, partitions=parts) for t, parts in by_topic.items()],
            timeout_ms=0,
        )

    return request(EARLIEST), request(LATEST)


def leader_offsets_answers(
    earliest: ListOffsetsResponse, latest: ListOffsetsResponse
) -> dict[PartitionKey, LeaderOffsets]:
    starts = {(t.name, p.partition_index): p for t in earliest.topics for p in t.partitions}
    answers = {}
    for t in latest.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            start = starts.get(key)
            error = ErrorCode(p.error_code) or (
                ErrorCode(start.error_code) if start else ErrorCode.UNKNOWN_SERVER_ERROR
            )
            if error or start is None:
                answers[key] = LeaderOffsets(error or ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                answers[key] = LeaderOffsets(ErrorCode.NONE, start.offset, p.offset)
    return answers


# -- the leader's side ---------------------------------------------------------------------------


def follower_fetch(
    request: FetchRequest, version: int, topic_names: Mapping[uuid.UUID, str]
) -> tuple[FetchRequestData, int]:
    """A follower's Fetch as ``FetchRequestData`` (topics by name) and the follower's id."""
    if version >= 15 and request.replica_state is not None:
        replica_id, replica_epoch = request.replica_state.replica_id, request.replica_state.replica_epoch
    else:
        replica_id, replica_epoch = request.replica_id, -1
    partitions: dict[PartitionKey, FollowerFetch] = {}
    for t in request.topics:
        topic = topic_names.get(t.topic_id, "") if version >= 13 else t.topic
        for p in t.partitions:
            partitions[(topic, p.partition)] = FollowerFetch(
                replica_id,
                replica_epoch,
                p.fetch_offset,
                p.log_start_offset,
                p.current_leader_epoch if version >= 9 else NO_EPOCH,
                p.last_fetched_epoch if version >= 12 else NO_EPOCH,
                p.partition_max_bytes,
            )
    data = FetchRequestData(replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes, partitions)
    return data, replica_id


def fetch_partition_data(index: int, answer: FetchAnswer) -> _PartitionData:
    diverging = answer.diverging_epoch
    return _PartitionData(
        partition_index=index,
        error_code=int(answer.error),
        high_watermark=answer.high_watermark,
        last_stable_offset=answer.last_stable_offset,
        log_start_offset=answer.log_start_offset,
        diverging_epoch=_PartitionData.EpochEndOffset(
            epoch=diverging[0] if diverging else -1, end_offset=diverging[1] if diverging else -1
        ),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=answer.records,
    )
