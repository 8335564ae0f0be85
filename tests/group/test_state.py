from hypothesis import given
from hypothesis import strategies as st

from onceflow.broker.group.state import (
    TRANSITIONS,
    GroupEvent,
    GroupState,
    IllegalGroupTransition,
    next_state,
)
from onceflow.protocol.errors import KafkaError


@given(st.sampled_from(list(GroupState)), st.sampled_from(list(GroupEvent)))
def test_every_pair_is_either_in_the_table_or_refused_by_name(state, event):
    if (state, event) in TRANSITIONS:
        assert next_state("g", state, event) is TRANSITIONS[(state, event)]
    else:
        try:
            next_state("g", state, event)
        except IllegalGroupTransition as exc:
            assert exc.state is state and exc.event is event
            assert state.name in str(exc) and event.name in str(exc)
            assert isinstance(exc, KafkaError)
        else:
            raise AssertionError(f"{state} + {event} should be refused")


def test_kafka_valid_previous_states():
    # Kafka's GroupState.validPreviousStates, read from the table.
    previous: dict[GroupState, set[GroupState]] = {}
    for (src, _event), dst in TRANSITIONS.items():
        previous.setdefault(dst, set()).add(src)
    S = GroupState
    assert previous[S.PREPARING_REBALANCE] == {S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE}
    assert previous[S.COMPLETING_REBALANCE] == {S.PREPARING_REBALANCE}
    assert previous[S.STABLE] == {S.COMPLETING_REBALANCE}
    assert previous[S.EMPTY] == {S.PREPARING_REBALANCE}
    assert previous[S.DEAD] == set(S)


def test_dead_is_terminal():
    for event in GroupEvent:
        if event is not GroupEvent.DELETE:
            assert (GroupState.DEAD, event) not in TRANSITIONS
