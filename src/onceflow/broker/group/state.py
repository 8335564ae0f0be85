"""The classic consumer group's state machine, as data.

Rule: every legal move of a group's state is one entry of :data:`TRANSITIONS`; anything else is a
bug in the coordinator and raises :class:`IllegalGroupTransition` naming the state and the event.
The states and their meaning are Kafka's (``GroupMetadata.scala`` in the classic coordinator):

- ``EMPTY``: no members; the group may still hold committed offsets.
- ``PREPARING_REBALANCE``: a rebalance started; the coordinator waits for members to (re)join.
- ``COMPLETING_REBALANCE``: every member joined; waiting for the leader's assignment (SyncGroup).
- ``STABLE``: the leader's assignment was handed out; members heartbeat.
- ``DEAD``: the group was deleted or expired; nothing may use it again.
"""

from __future__ import annotations

import enum

from onceflow.protocol.errors import ErrorCode, KafkaError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def kafka_name(self) -> str:
        """The name DescribeGroups and ListGroups put on the wire."""
        return self.value


class GroupEvent(enum.Enum):
    # A member joins, rejoins with new metadata, leaves or expires while the group is settled.
    PREPARE_REBALANCE = "prepare_rebalance"
    # The join phase ended (all members rejoined, or the rebalance/initial delay timed out) ...
    JOIN_COMPLETED = "join_completed"  # ... and some members remain
    ALL_MEMBERS_LEFT = "all_members_left"  # ... and nobody is left
    # The leader's SyncGroup delivered the assignment.
    ASSIGNMENT_RECEIVED = "assignment_received"
    # DeleteGroups, or expiry of an empty group's last offsets.
    DELETE = "delete"


S, E = GroupState, GroupEvent

TRANSITIONS: dict[tuple[GroupState, GroupEvent], GroupState] = {
    (S.EMPTY, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.STABLE, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.COMPLETING_REBALANCE, E.PREPARE_REBALANCE): S.PREPARING_REBALANCE,
    (S.PREPARING_REBALANCE, E.JOIN_COMPLETED): S.COMPLETING_REBALANCE,
    (S.PREPARING_REBALANCE, E.ALL_MEMBERS_LEFT): S.EMPTY,
    (S.COMPLETING_REBALANCE, E.ASSIGNMENT_RECEIVED): S.STABLE,
    # Kafka lets any state, Dead included, move to Dead: deleting twice is harmless.
    (S.EMPTY, E.DELETE): S.DEAD,
    (S.PREPARING_REBALANCE, E.DELETE): S.DEAD,
    (S.COMPLETING_REBALANCE, E.DELETE): S.DEAD,
    (S.STABLE, E.DELETE): S.DEAD,
    (S.DEAD, E.DELETE): S.DEAD,
}

del S, E


class IllegalGroupTransition(KafkaError):
    """The coordinator tried a move the state machine does not allow (a bug, not bad input)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, group_id: str, state: GroupState, event: GroupEvent) -> None:
        self.state = state
        self.event = event
        super().__init__(f"group {group_id!r}: event {event.name} is not allowed in state {state.name}")


def next_state(group_id: str, state: GroupState, event: GroupEvent) -> GroupState:
    """The state after ``event``; raises :class:`IllegalGroupTransition` for a move not in the table."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalGroupTransition(group_id, state, event) from None
