"""What a group of the consumer group protocol (KIP-848) is: its members, their subscriptions and
assignments, the group and target epochs, and the heartbeat as the handler hands it in and gets it
answered. Plain state with the few rules that keep it consistent (a member's partitions are released
when its assignment changes or it goes); :mod:`consumer_groups` changes it and
:mod:`consumer_group_persistence` writes and replays it.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from onceflow.broker.coordinator.scheduler import TimerHandle
from onceflow.broker.group import assignment as a
from onceflow.broker.group import consumer_group_records as rec
from onceflow.broker.group.assignment import DEFAULT_ASSIGNOR, Assignment
from onceflow.broker.group.reconciliation import MemberAssignment, MemberState

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NO_GENERATION = -1  # the generation / member epoch of a commit from outside group management
# OffsetCommit v9 is the first to carry a member epoch; members of these groups must use it (KIP-848).
FIRST_MEMBER_EPOCH_COMMIT_VERSION = 9


@dataclasses.dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's broker settings of the same names (``group.consumer.*``)."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2147483647
    assignors: tuple[str, ...] = ("uniform", "range")


class TopicLookup(Protocol):
    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        """The topic's id and partition count, or None if there is no such topic."""
        ...

    def topic_names(self) -> Iterable[str]:
        """Every topic clients may subscribe to (not the internal ones)."""
        ...


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclasses.dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = dataclasses.field(
        default_factory=lambda: MemberAssignment(MemberState.STABLE, 0, 0, a.EMPTY)
    )
    session_timer: TimerHandle | None = None
    rebalance_timer: TimerHandle | None = None

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.rebalance_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.rebalance_timer = None


@dataclasses.dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    target: dict[str, Assignment] = dataclasses.field(default_factory=dict)
    members: dict[str, ConsumerMember] = dataclasses.field(default_factory=dict)
    # The subscribed topics as of the group epoch: name -> (topic id, partition count).
    topics: dict[str, tuple[uuid.UUID, int]] = dataclasses.field(default_factory=dict)
    # Who holds each partition (assigned or pending revocation): a partition has one holder at most.
    owners: dict[tuple[uuid.UUID, int], str] = dataclasses.field(default_factory=dict)
    static_members: dict[str, str] = dataclasses.field(default_factory=dict)
    assignor: str = DEFAULT_ASSIGNOR  # the one that made the target assignment
    # The group's records in the log, by key (kept by replay): what the next change is compared with.
    persisted: dict[rec.ConsumerGroupKey, bytes] = dataclasses.field(default_factory=dict)

    def working_copy(self) -> ConsumerGroup:
        """A copy to work out a change on: the live group stays as it is until the change's records
        are replayed into it. Members are shared until :meth:`own` copies the one a change touches."""
        return ConsumerGroup(
            self.group_id,
            self.epoch,
            self.target_epoch,
            dict(self.target),
            dict(self.members),
            dict(self.topics),
            dict(self.owners),
            dict(self.static_members),
            self.assignor,
            self.persisted,  # read only: what the change is compared with
        )

    def own(self, member_id: str) -> ConsumerMember:
        """The member, copied into this working copy (without timers: those stay the live one's), so
        that changing it leaves the live group alone."""
        shared = self.members[member_id]
        member = ConsumerMember.__new__(ConsumerMember)
        member.__dict__.update(shared.__dict__)
        member.session_timer = member.rebalance_timer = None
        self.members[member_id] = member
        return member

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.epoch > self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.assignment.reconciled_to(self.target_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def set_assignment(self, member: ConsumerMember, new: MemberAssignment) -> None:
        self._release(member)
        member.assignment = new
        for tp in a.pairs(new.assigned) | a.pairs(new.pending_revocation):
            self.owners[tp] = member.member_id

    def _release(self, member: ConsumerMember) -> None:
        held = a.pairs(member.assignment.assigned) | a.pairs(member.assignment.pending_revocation)
        for tp in held:
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def remove(self, member: ConsumerMember) -> None:
        """Take the member out (its timers are the replay's to cancel: this may be a working copy)."""
        self._release(member)
        del self.members[member.member_id]
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]

    def subscribed_topic_names(self) -> set[str]:
        return set(self.topics)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, (known_id, _) in self.topics.items():
            if known_id == topic_id:
                return name
        return None


@dataclasses.dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""


@dataclasses.dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged since the member's last heartbeat


# (group id, [(key, value or None for a tombstone)], what to do once they are written): the records go
# to __consumer_offsets and come back through ConsumerGroups.replay before ``on_written`` runs.
Emit = Callable[[str, list[tuple[bytes, bytes | None]], Callable[[], None] | None], None]
# (group id, delay, callback): a timer, which the coordinator runs as an operation of the group's partition.
CallLater = Callable[[str, int, Callable[[], None]], TimerHandle]
