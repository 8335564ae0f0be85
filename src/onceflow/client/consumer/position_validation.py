"""Checking a consumer's position after a leader change (KIP-320), as Kafka's consumer does.

A position remembers the leader epoch of the last record consumed before it (from the batch header, or
from the committed offset). When metadata shows a newer leader epoch for the partition, fetching
pauses and the consumer asks the new leader, with OffsetsForLeaderEpoch, where that epoch ended in its
log. If it ended before the position, the log was truncated under us (the old leader had records the
new one never got: only possible with an unclean election or lost disks): the position moves back to
where the logs part, or, with ``auto.offset.reset=none``, the consumer raises
:class:`LogTruncation` naming it. An answer without an epoch (the leader knows nothing that old)
resets by ``auto.offset.reset``. Otherwise the position stands and fetching resumes.

Pure functions: the fetcher builds the request and applies the outcome.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.consumer.subscription_state import PartitionState
from onceflow.protocol.errors import ErrorCode, KafkaError

CONSUMER_REPLICA_ID = -1
UNDEFINED = -1


class LogTruncation(KafkaError):
    """The log was truncated below the consumer's position and ``auto.offset.reset`` is none."""

    def __init__(self, message: str, divergent_offset: int | None) -> None:
        super().__init__(message, ErrorCode.OFFSET_OUT_OF_RANGE)
        self.divergent_offset = divergent_offset


class Outcome(enum.Enum):
    VALID = "valid"  # the position stands
    RETRY = "retry"  # refresh metadata and ask again
    SEEK = "seek"  # truncated: move to ``offset`` (epoch ``epoch``)
    RESET = "reset"  # no usable answer: reset by auto.offset.reset
    TRUNCATED = "truncated"  # truncated and no reset policy: raise LogTruncation


@dataclass(frozen=True, slots=True)
class Validation:
    outcome: Outcome
    offset: int = UNDEFINED
    epoch: int = UNDEFINED


def needs_validation(state: PartitionState, leader_epoch: int) -> bool:
    """Whether metadata naming ``leader_epoch`` must pause fetching to check the position."""
    return leader_epoch > state.leader_epoch and state.offset_epoch is not None and state.position is not None


def build_request(partitions: list[tuple[TopicPartition, PartitionState]]) -> OffsetForLeaderEpochRequest:
    by_topic: dict[str, list] = {}
    for tp, st in partitions:
        by_topic.setdefault(tp.topic, []).append(
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=tp.partition,
                current_leader_epoch=st.leader_epoch,
                leader_epoch=st.offset_epoch,
            )
        )
    return OffsetForLeaderEpochRequest(
        replica_id=CONSUMER_REPLICA_ID,
        topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )


def judge(position: int, error: ErrorCode, epoch: int, end_offset: int, reset_policy: str) -> Validation:
    """What to do with one partition's OffsetsForLeaderEpoch answer."""
    if error != ErrorCode.NONE:
        return Validation(Outcome.RETRY)
    has_policy = reset_policy != "none"
    if end_offset == UNDEFINED or epoch == UNDEFINED:
        return Validation(Outcome.RESET if has_policy else Outcome.TRUNCATED)
    if end_offset < position:
        return Validation(Outcome.SEEK if has_policy else Outcome.TRUNCATED, end_offset, epoch)
    return Validation(Outcome.VALID)
