"""How a member of a consumer-protocol group (KIP-848) moves from its current assignment to its
target, one heartbeat at a time, so that no partition is ever owned by two members at once.

Kafka's rules (its ``CurrentAssignmentBuilder``), as a pure function:

- a member whose current assignment holds partitions the target gave to others must first give them
  up: it keeps its epoch, is told its assignment without them, and waits in UNREVOKED_PARTITIONS
  until a heartbeat lists the partitions it owns and none of the revoked ones is among them;
- then it moves to the target epoch; of the partitions it gains, those still owned (or being revoked)
  by another member are held back, and it waits in UNRELEASED_PARTITIONS until they are free;
- otherwise it is STABLE at the target epoch.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable

from onceflow.broker.group import assignment as a
from onceflow.broker.group.assignment import Assignment


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclasses.dataclass(frozen=True)
class MemberAssignment:
    state: MemberState
    epoch: int
    previous_epoch: int
    assigned: Assignment
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)

    def reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.epoch == target_epoch


def next_assignment(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_other: Callable[[uuid.UUID, int], bool],
) -> MemberAssignment:
    """The member's next state. ``owned`` is what its heartbeat says it owns (None when the heartbeat
    did not say); ``owned_by_other(topic, partition)`` whether another member holds that partition
    as assigned or pending revocation."""
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or a.intersect(owned, current.pending_revocation):
            return current  # still waiting for the member to let them go
        return _towards_target(current, target_epoch, target, owned_by_other)
    if current.state is MemberState.STABLE and current.epoch == target_epoch:
        return current
    return _towards_target(current, target_epoch, target, owned_by_other)


def _towards_target(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owned_by_other: Callable[[uuid.UUID, int], bool],
) -> MemberAssignment:
    kept = a.intersect(current.assigned, target)
    revoking = a.minus(current.assigned, target)
    if revoking:
        return MemberAssignment(
            MemberState.UNREVOKED_PARTITIONS, current.epoch, current.previous_epoch, kept, revoking
        )
    gained = a.minus(target, current.assigned)
    free = a.from_pairs(tp for tp in a.pairs(gained) if not owned_by_other(*tp))
    assigned = a.union(kept, free)
    state = MemberState.UNRELEASED_PARTITIONS if a.minus(gained, free) else MemberState.STABLE
    previous = current.epoch if target_epoch != current.epoch else current.previous_epoch
    return MemberAssignment(state, target_epoch, previous, assigned)
