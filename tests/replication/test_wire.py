"""The replication requests survive Kafka's encoding at the versions a follower may use."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
)

from onceflow.broker.replica import wire
from onceflow.broker.replica.fetcher import EpochRequestData, FetchRequestData, LeaderOffsetsRequestData
from onceflow.broker.replica.partition import FetchAnswer, FollowerFetch
from onceflow.protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)


def round_trip(message, version):
    return type(message).decode(message.encode(version=version), version=version)


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_a_follower_fetch_reaches_the_leader_as_sent(version):
    data = FetchRequestData(
        1,
        500,
        1,
        10_000,
        {
            ("t", 0): FollowerFetch(2, 44, 100, 3, 7, 6, 4096),
            ("t", 1): FollowerFetch(2, 44, 0, 0, 7, -1, 4096),
        },
    )
    request = round_trip(wire.fetch_request(data, {"t": TOPIC_ID}), version)
    parsed, replica = wire.follower_fetch(request, version, {TOPIC_ID: "t"})
    assert replica == 2
    assert (parsed.max_wait_ms, parsed.min_bytes, parsed.max_bytes) == (500, 1, 10_000)
    expected_epoch = 44 if version >= 15 else -1  # the broker epoch travels from v15 on
    assert parsed.partitions[("t", 0)] == FollowerFetch(2, expected_epoch, 100, 3, 7, 6, 4096)
    assert request.session_id == 0 and request.session_epoch == -1


@pytest.mark.parametrize("version", [12, 13, 16])
def test_the_leaders_answer_keeps_the_diverging_epoch(version):
    answers = [
        FetchAnswer(ErrorCode.NONE, 10, 8, 0, 12, b"", (3, 9)),
        FetchAnswer(ErrorCode.FENCED_LEADER_EPOCH),
    ]
    partitions = [wire.fetch_partition_data(i, a) for i, a in enumerate(answers)]
    response = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[FetchResponse.FetchableTopicResponse(topic="t", topic_id=TOPIC_ID, partitions=partitions)],
    )
    got = wire.fetch_answers(round_trip(response, version), {TOPIC_ID: "t"})
    assert got[("t", 0)].diverging_epoch == (3, 9)
    assert (got[("t", 0)].high_watermark, got[("t", 0)].last_stable_offset) == (10, 8)
    assert got[("t", 1)].error == ErrorCode.FENCED_LEADER_EPOCH


def test_offsets_for_leader_epoch_as_a_replica():
    request = round_trip(wire.epoch_request(EpochRequestData(1, {("t", 0): (5, 3)}), 2), 4)
    assert request.replica_id == 2
    [topic] = request.topics
    assert (topic.partitions[0].current_leader_epoch, topic.partitions[0].leader_epoch) == (5, 3)
    E = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    response = OffsetForLeaderEpochResponse(
        throttle_time_ms=0,
        topics=[
            E(
                topic="t",
                partitions=[E.EpochEndOffset(error_code=0, partition=0, leader_epoch=2, end_offset=40)],
            )
        ],
    )
    assert wire.epoch_answers(round_trip(response, 4))[("t", 0)].end_offset == 40


def test_leader_offsets_are_two_list_offsets():
    earliest, latest = wire.leader_offsets_requests(LeaderOffsetsRequestData(1, {("t", 0): 5}), 2)
    assert [p.timestamp for r in (earliest, latest) for t in r.topics for p in t.partitions] == [-2, -1]
    R = ListOffsetsResponse.ListOffsetsTopicResponse
    P = R.ListOffsetsPartitionResponse

    def response(offset, error=0):
        return ListOffsetsResponse(
            throttle_time_ms=0,
            topics=[
                R(
                    name="t",
                    partitions=[
                        P(partition_index=0, error_code=error, timestamp=-1, offset=offset, leader_epoch=5)
                    ],
                )
            ],
        )

    answer = wire.leader_offsets_answers(response(4), response(20))[("t", 0)]
    assert (answer.error, answer.log_start_offset, answer.log_end_offset) == (ErrorCode.NONE, 4, 20)
    assert (
        wire.leader_offsets_answers(response(4), response(-1, 74))[("t", 0)].error
        == ErrorCode.FENCED_LEADER_EPOCH
    )
