"""Which committed offsets of a group have expired: ``offsets.retention.minutes`` with Kafka's three
cases (KIP-211, KIP-496).

- an Empty classic group with group management: every offset expires ``retention`` after the group
  became Empty (members keep their offsets alive while they exist);
- a group without group management (standalone commits): each offset ``retention`` after its commit;
- a Stable classic group of the "consumer" protocol type, and every consumer-protocol group (KIP-848):
  offsets of topics no member subscribes to any more, ``retention`` after their commit; if a classic
  member's subscription can't be read, none.

An explicit expire timestamp (OffsetCommit v1) wins over all of them.
"""

from __future__ import annotations

from onceflow.broker.group.consumer_group import ConsumerGroup
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offsets import CommittedOffset, TopicPartition
from onceflow.broker.group.state import GroupState
from onceflow.broker.group.subscriptions import subscribed_topics


def _due(
    offsets: dict[TopicPartition, CommittedOffset],
    subscribed: set[str],
    since_empty: int | None,
    retention: int,
    now: int,
) -> list[TopicPartition]:
    expired = []
    for tp, value in offsets.items():
        if tp[0] in subscribed:
            continue
        if value.expire_timestamp >= 0:
            due = value.expire_timestamp
        elif since_empty is not None:
            due = since_empty + retention
        else:
            due = value.commit_timestamp + retention
        if due <= now:
            expired.append(tp)
    return expired


def expired_of_classic_group(
    group: GroupMetadata, offsets: dict[TopicPartition, CommittedOffset], now: int, retention: int
) -> list[TopicPartition]:
    if group.is_in(GroupState.EMPTY):
        since_empty = group.current_state_timestamp if group.protocol_type is not None else None
        return _due(offsets, set(), since_empty, retention, now)
    if group.protocol_type == "consumer" and group.is_in(GroupState.STABLE):
        subscribed = subscribed_topics(group)
        return [] if subscribed is None else _due(offsets, subscribed, None, retention, now)
    return []


def expired_of_consumer_group(
    group: ConsumerGroup, offsets: dict[TopicPartition, CommittedOffset], now: int, retention: int
) -> list[TopicPartition]:
    subscribed = group.subscribed_topic_names() if group.members else set()
    return _due(offsets, subscribed, None, retention, now)
