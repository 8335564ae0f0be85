"""A node's epoch states (KIP-595) and the moves between them, as data.

Every node is in exactly one state, for one epoch:

- UNATTACHED: knows the epoch but no leader, and has not voted in it;
- VOTED: has voted for another candidate in this epoch (and will vote for no other);
- CANDIDATE: asks for votes in this epoch (having voted for itself);
- LEADER: won this epoch; appends and decides what is committed;
- FOLLOWER: knows this epoch's leader and fetches from it;
- RESIGNED: was this epoch's leader and is stepping down (shutting down, or lost touch with the
  voters); it never leads this epoch again, and never votes in it.

:data:`TRANSITIONS` says which moves exist and how the epoch must change on each; anything else is an
:class:`IllegalTransition` naming both states. Beyond the table: a node votes and becomes a candidate
or leader only if it is a voter (an observer is only ever UNATTACHED or FOLLOWER), never votes for
itself as VOTED, never follows itself, and leads only with a majority of votes (checked by the
caller, which counts them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from onceflow.raft.errors import IllegalTransition
from onceflow.raft.storage import ElectionState


class Role(enum.Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


class EpochRule(enum.Enum):
    HIGHER = "a higher epoch"
    SAME = "the same epoch"
    SAME_OR_HIGHER = "the same or a higher epoch"
    NEXT = "the next epoch"

    def allows(self, old: int, new: int) -> bool:
        if self is EpochRule.HIGHER:
            return new > old
        if self is EpochRule.SAME:
            return new == old
        if self is EpochRule.SAME_OR_HIGHER:
            return new >= old
        return new == old + 1


U, V, C, L, F, R = Role.UNATTACHED, Role.VOTED, Role.CANDIDATE, Role.LEADER, Role.FOLLOWER, Role.RESIGNED
H, S, SH, N = EpochRule.HIGHER, EpochRule.SAME, EpochRule.SAME_OR_HIGHER, EpochRule.NEXT

# (from, to) -> how the epoch must change. A higher epoch always resets to UNATTACHED first when a
# vote is involved (as Kafka does), so VOTED is entered only from UNATTACHED of the same epoch.
TRANSITIONS: dict[tuple[Role, Role], EpochRule] = {
    (U, U): H,
    (U, V): S,
    (U, F): SH,
    (U, C): N,
    (V, U): H,
    (V, F): SH,
    (V, C): N,
    (C, U): H,
    (C, F): SH,
    (C, C): N,
    (C, L): S,
    (F, U): H,
    (F, F): H,
    (F, C): N,
    (L, U): H,
    (L, F): H,
    (L, R): S,
    (R, U): H,
    (R, F): H,
    (R, C): N,
}

VOTER_ONLY = frozenset({V, C, L, R})


@dataclass(frozen=True, slots=True)
class EpochState:
    """Where a node stands: its role in ``epoch``, the leader it knows (LEADER, RESIGNED: itself;
    FOLLOWER: the one it follows) and the candidate it voted for (VOTED: another; CANDIDATE: itself)."""

    role: Role
    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None

    def election(self, voters: tuple[int, ...]) -> ElectionState:
        """What ``quorum-state`` records for this state."""
        return ElectionState(self.epoch, self.leader_id, self.voted_id, voters)

    def __str__(self) -> str:
        extra = ""
        if self.leader_id is not None:
            extra = f", leader {self.leader_id}"
        elif self.voted_id is not None:
            extra = f", voted for {self.voted_id}"
        return f"{self.role.value}(epoch {self.epoch}{extra})"


def check_transition(current: EpochState, target: EpochState, *, local_id: int, is_voter: bool) -> None:
    """Raise :class:`IllegalTransition` unless moving from ``current`` to ``target`` is allowed."""
    rule = TRANSITIONS.get((current.role, target.role))
    if rule is None:
        raise IllegalTransition(f"no transition from {current} to {target}")
    if not rule.allows(current.epoch, target.epoch):
        raise IllegalTransition(f"{current} -> {target} must move to {rule.value}")
    if target.role in VOTER_ONLY and not is_voter:
        raise IllegalTransition(f"node {local_id} is an observer and cannot become {target}")
    if target.role is V and target.voted_id in (None, local_id):
        raise IllegalTransition(f"{target}: a node votes for itself only as a candidate")
    if target.role is F and target.leader_id in (None, local_id):
        raise IllegalTransition(f"{target}: a follower follows another node")
    if target.role in (L, R) and target.leader_id != local_id:
        raise IllegalTransition(f"{target}: node {local_id} can only lead itself")
    if target.role is C and target.voted_id != local_id:
        raise IllegalTransition(f"{target}: a candidate votes for itself")
    if target.role in (U, C) and target.leader_id is not None:
        raise IllegalTransition(f"{target} knows no leader")


def initial_state(
    election: ElectionState | None, log_end_epoch: int, *, local_id: int, is_voter: bool
) -> EpochState:
    """The state a node starts in after a (re)start, from its ``quorum-state`` (Kafka's
    ``QuorumState.initialize``): a leader comes back RESIGNED (it must never lead or vote in that
    epoch again, and entries it wrote but lost in the crash must not be reused with the same epoch),
    a candidate as a candidate of the same epoch, a voter as VOTED, a follower as a follower."""
    if election is None:
        return EpochState(U, max(log_end_epoch, 0))
    if election.epoch < log_end_epoch:
        # The file is older than the log (it cannot be with our ordering, but Kafka guards it too).
        return EpochState(U, log_end_epoch)
    epoch = election.epoch
    if election.leader_id == local_id and is_voter:
        return EpochState(R, epoch, leader_id=local_id)
    if election.voted_id == local_id and is_voter:
        return EpochState(C, epoch, voted_id=local_id)
    if election.voted_id is not None and is_voter:
        return EpochState(V, epoch, voted_id=election.voted_id)
    if election.leader_id is not None and election.leader_id != local_id:
        return EpochState(F, epoch, leader_id=election.leader_id)
    return EpochState(U, epoch)
