"""The epoch-state table: every (state, state, epoch change) is either in the table and allowed, or
refused with an error naming both states; and what a node restarts as."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.raft.errors import IllegalTransition
from onceflow.raft.quorum_state import (
    TRANSITIONS,
    EpochRule,
    EpochState,
    Role,
    check_transition,
    initial_state,
)
from onceflow.raft.storage import ElectionState

LOCAL = 1
OTHER = 2


def state(role: Role, epoch: int) -> EpochState:
    """A well-formed state of ``role`` for node LOCAL."""
    if role is Role.VOTED:
        return EpochState(role, epoch, voted_id=OTHER)
    if role is Role.FOLLOWER:
        return EpochState(role, epoch, leader_id=OTHER)
    if role in (Role.LEADER, Role.RESIGNED):
        return EpochState(role, epoch, leader_id=LOCAL)
    if role is Role.CANDIDATE:
        return EpochState(role, epoch, voted_id=LOCAL)
    return EpochState(role, epoch)


@given(st.sampled_from(Role), st.sampled_from(Role), st.integers(0, 5), st.integers(-2, 2))
def test_every_pair_is_allowed_exactly_as_the_table_says(
    source: Role, target: Role, epoch: int, delta: int
) -> None:
    current, wanted = state(source, epoch), state(target, max(epoch + delta, 0))
    rule = TRANSITIONS.get((source, target))
    allowed = rule is not None and rule.allows(current.epoch, wanted.epoch)
    if allowed:
        check_transition(current, wanted, local_id=LOCAL, is_voter=True)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition(current, wanted, local_id=LOCAL, is_voter=True)
        assert source.value in str(info.value) and target.value in str(info.value)


def test_the_table_never_lets_a_leader_lead_again_or_a_voter_vote_twice_in_one_epoch() -> None:
    for (source, target), rule in TRANSITIONS.items():
        if target in (Role.LEADER, Role.CANDIDATE):
            assert source is not Role.LEADER and source is not Role.RESIGNED or rule is EpochRule.NEXT
        if target is Role.VOTED:
            assert source is Role.UNATTACHED and rule is EpochRule.SAME
        if source is Role.LEADER:
            assert target is Role.RESIGNED or rule is EpochRule.HIGHER


@pytest.mark.parametrize("target", [Role.VOTED, Role.CANDIDATE, Role.LEADER, Role.RESIGNED])
def test_an_observer_never_votes_stands_or_leads(target: Role) -> None:
    source = {Role.VOTED: Role.UNATTACHED, Role.CANDIDATE: Role.UNATTACHED, Role.LEADER: Role.CANDIDATE}.get(
        target, Role.LEADER
    )
    epoch = 3 if target is not Role.CANDIDATE else 2
    with pytest.raises(IllegalTransition, match="observer"):
        check_transition(state(source, epoch), state(target, 3), local_id=LOCAL, is_voter=False)


def test_malformed_targets_are_refused() -> None:
    unattached = state(Role.UNATTACHED, 1)
    with pytest.raises(IllegalTransition, match="votes for itself"):
        check_transition(unattached, EpochState(Role.VOTED, 1, voted_id=LOCAL), local_id=LOCAL, is_voter=True)
    with pytest.raises(IllegalTransition, match="follows another"):
        check_transition(
            unattached, EpochState(Role.FOLLOWER, 1, leader_id=LOCAL), local_id=LOCAL, is_voter=True
        )


@pytest.mark.parametrize(
    ("election", "expected"),
    [
        (None, EpochState(Role.UNATTACHED, 2)),
        (ElectionState(4, leader_id=LOCAL), EpochState(Role.RESIGNED, 4, leader_id=LOCAL)),
        (ElectionState(4, voted_id=LOCAL), EpochState(Role.CANDIDATE, 4, voted_id=LOCAL)),
        (ElectionState(4, voted_id=OTHER), EpochState(Role.VOTED, 4, voted_id=OTHER)),
        (ElectionState(4, leader_id=OTHER), EpochState(Role.FOLLOWER, 4, leader_id=OTHER)),
        (ElectionState(4), EpochState(Role.UNATTACHED, 4)),
    ],
)
def test_a_restarted_node_resumes_from_its_quorum_state(election, expected) -> None:
    assert initial_state(election, 2, local_id=LOCAL, is_voter=True) == expected


def test_a_quorum_state_older_than_the_log_starts_unattached_at_the_log_epoch() -> None:
    assert initial_state(ElectionState(2, voted_id=OTHER), 5, local_id=LOCAL, is_voter=True) == EpochState(
        Role.UNATTACHED, 5
    )
