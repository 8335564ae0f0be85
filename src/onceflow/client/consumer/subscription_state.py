"""What the consumer reads: the subscription or manual assignment, and per partition its position.

Positions live here and nowhere else. The fetcher advances a partition's ``fetch_offset`` (how far
data has been requested) ahead of its ``position`` (the next record the user gets); a seek or reset
bumps the partition's ``epoch`` so that buffered and in-flight data for the old position is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import KafkaError

NO_SUBSCRIPTION = "none"
AUTO_TOPICS = "topics"  # subscribe(): partitions come from the group
USER_ASSIGNED = "assigned"  # assign(): the user picks partitions


@dataclass(slots=True)
class PartitionState:
    position: int | None = None  # next offset handed to the user; None until initialised
    fetch_offset: int | None = None  # next offset to request from the broker
    epoch: int = 0  # bumped by seek/reset: fetched data from an older epoch is discarded
    paused: bool = False
    reset_strategy: str | None = None  # "earliest"/"latest" when a reset is pending
    error: KafkaError | None = None  # raised to the user at the next poll (e.g. out of range, no reset)
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # KIP-320: the leader epoch of the record before the position (None: unknown), the partition's
    # leader epoch as metadata last said, and whether fetching waits for the new leader to confirm
    # the position (see position_validation).
    offset_epoch: int | None = None
    leader_epoch: int = -1
    awaiting_validation: bool = False

    def seek(self, offset: int, offset_epoch: int | None = None) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.epoch += 1
        self.reset_strategy = None
        self.error = None
        self.offset_epoch = offset_epoch
        self.awaiting_validation = False

    def request_reset(self, strategy: str) -> None:
        self.position = None
        self.fetch_offset = None
        self.epoch += 1
        self.reset_strategy = strategy
        self.offset_epoch = None
        self.awaiting_validation = False


class SubscriptionState:
    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset
        self.mode = NO_SUBSCRIPTION
        self.topics: set[str] = set()
        # subscribe(pattern=...): topics whose whole name matches; ``topics`` holds the matches found
        # so far (classic protocol: resolved here from metadata; consumer protocol: by the coordinator).
        self.pattern: re.Pattern[str] | None = None
        self.partitions: dict[TopicPartition, PartitionState] = {}

    def subscribe(self, topics: list[str], pattern: re.Pattern[str] | None = None) -> None:
        if self.mode == USER_ASSIGNED:
            raise KafkaError(
                "subscribe() after assign(): a consumer either subscribes or assigns, call unsubscribe() first"
            )
        self.mode = AUTO_TOPICS
        self.topics = set(topics)
        self.pattern = pattern

    def match_pattern(self, names: list[str]) -> bool:
        """Set ``topics`` to the names the pattern matches in full; returns whether they changed."""
        assert self.pattern is not None
        matched = {n for n in names if self.pattern.fullmatch(n)}
        changed = matched != self.topics
        self.topics = matched
        return changed

    def assign_from_user(self, partitions: list[TopicPartition]) -> None:
        if self.mode == AUTO_TOPICS:
            raise KafkaError(
                "assign() after subscribe(): a consumer either subscribes or assigns, call unsubscribe() first"
            )
        self.mode = USER_ASSIGNED
        self.set_assignment(partitions)

    def unsubscribe(self) -> None:
        self.mode = NO_SUBSCRIPTION
        self.topics = set()
        self.pattern = None
        self.partitions = {}

    def set_assignment(self, partitions: list[TopicPartition]) -> None:
        """Replace the assigned partitions, keeping the state of those that stay."""
        self.partitions = {tp: self.partitions.get(tp) or PartitionState() for tp in partitions}

    def add(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.setdefault(tp, PartitionState())

    def remove(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.pop(tp, None)

    def assigned(self) -> list[TopicPartition]:
        return list(self.partitions)

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self.partitions[tp]
        except KeyError:
            raise KafkaError(
                f"partition {tp.topic}-{tp.partition} is not assigned to this consumer"
            ) from None

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, st in self.partitions.items() if st.position is None]
