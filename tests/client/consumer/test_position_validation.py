"""KIP-320 on the consumer side: when a position needs checking after a leader change, and what an
OffsetsForLeaderEpoch answer makes of it (Kafka's SubscriptionState.maybeCompleteValidation)."""

from __future__ import annotations

import pytest

from onceflow.client.consumer.fetcher import CompletedFetch, batch_epochs
from onceflow.client.consumer.position_validation import Outcome, build_request, judge, needs_validation
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.consumer.subscription_state import PartitionState
from onceflow.protocol import records
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.record_codec import encode_batch


def state(position=10, offset_epoch=3, leader_epoch=3) -> PartitionState:
    st = PartitionState()
    st.seek(position, offset_epoch)
    st.leader_epoch = leader_epoch
    return st


def test_a_newer_leader_epoch_makes_a_position_with_an_epoch_wait():
    assert needs_validation(state(), 4)
    assert not needs_validation(state(), 3)  # the same leader
    assert not needs_validation(state(offset_epoch=None), 4)  # nothing to compare (e.g. after seek())
    st = state()
    st.request_reset("earliest")
    assert not needs_validation(st, 4)


@pytest.mark.parametrize(
    ("answer", "policy", "expected"),
    [
        ((ErrorCode.NONE, 3, 12), "latest", (Outcome.VALID, -1, -1)),
        ((ErrorCode.NONE, 3, 10), "latest", (Outcome.VALID, -1, -1)),  # ends exactly at the position
        ((ErrorCode.NONE, 2, 7), "latest", (Outcome.SEEK, 7, 2)),  # truncated: back to where logs part
        ((ErrorCode.NONE, 2, 7), "none", (Outcome.TRUNCATED, 7, 2)),
        ((ErrorCode.NONE, -1, -1), "earliest", (Outcome.RESET, -1, -1)),  # the leader knows no such epoch
        ((ErrorCode.NONE, -1, -1), "none", (Outcome.TRUNCATED, -1, -1)),
        ((ErrorCode.FENCED_LEADER_EPOCH, -1, -1), "none", (Outcome.RETRY, -1, -1)),
        ((ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1), "latest", (Outcome.RETRY, -1, -1)),
        ((ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1), "latest", (Outcome.RETRY, -1, -1)),
    ],
)
def test_judging_the_new_leaders_answer(answer, policy, expected):
    error, epoch, end = answer
    verdict = judge(10, error, epoch, end, policy)
    assert (verdict.outcome, verdict.offset, verdict.epoch) == expected


def test_the_request_names_the_current_and_the_positions_epoch():
    request = build_request([(TopicPartition("t", 2), state(leader_epoch=5, offset_epoch=3))])
    [topic] = request.topics
    [partition] = topic.partitions
    assert (request.replica_id, topic.topic) == (-1, "t")
    assert (partition.partition, partition.current_leader_epoch, partition.leader_epoch) == (2, 5, 3)


def test_the_position_epoch_comes_from_the_batch_holding_the_record():
    raw = bytearray()
    for base, epoch, count in ((0, 1, 3), (3, 4, 2), (5, -1, 1)):
        batch = bytearray(encode_batch([(None, b"v")] * count, timestamp_ms=1))
        records.set_base_offset(batch, 0, base)
        records.set_partition_leader_epoch(batch, 0, epoch)
        raw += batch
    assert batch_epochs(bytes(raw)) == [(2, 1), (4, 4), (5, -1)]
    assert batch_epochs(bytes(raw[:-10])) == [(2, 1), (4, 4)]  # a cut-off batch is left out
    chunk = CompletedFetch(0, 0, 6, bytes(raw), [], batch_epochs=batch_epochs(bytes(raw)))
    assert [chunk.epoch_of(o) for o in (0, 2, 3, 4, 5, 6)] == [1, 1, 4, 4, None, None]
