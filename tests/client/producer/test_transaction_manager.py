"""The transaction state machine: a table, checked over every (state, event) pair."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.client.producer.errors import (
    IllegalTransactionStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from onceflow.client.producer.transaction_manager import (
    TRANSITIONS,
    TransactionManager,
    TxnEvent,
    TxnState,
)


def manager_in(state: TxnState) -> TransactionManager:
    tm = TransactionManager("tx")
    tm.state = state
    return tm


@given(st.sampled_from(list(TxnState)), st.sampled_from(list(TxnEvent)))
def test_every_pair_either_moves_as_the_table_says_or_is_refused_naming_both(state, event):
    tm = manager_in(state)
    expected = TRANSITIONS.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransactionStateError) as info:
            tm.transition(event)
        assert state.value in str(info.value) and event.value in str(info.value)
        assert tm.state is state  # a refused move changes nothing
    else:
        assert tm.transition(event) is expected
        assert tm.state is expected


@given(st.lists(st.sampled_from(list(TxnEvent)), max_size=30))
def test_random_event_sequences_stay_inside_the_table(events):
    tm = TransactionManager("tx")
    for event in events:
        before = tm.state
        try:
            tm.transition(event)
        except IllegalTransactionStateError:
            assert tm.state is before
        else:
            assert tm.state is TRANSITIONS[(before, event)]
    assert tm.state in TxnState


def test_the_happy_path():
    tm = TransactionManager("tx")
    for event, state in [
        (TxnEvent.INIT, TxnState.INITIALIZING),
        (TxnEvent.INITIALIZED, TxnState.READY),
        (TxnEvent.BEGIN, TxnState.IN_TRANSACTION),
        (TxnEvent.COMMIT, TxnState.COMMITTING_TRANSACTION),
        (TxnEvent.ENDED, TxnState.READY),
        (TxnEvent.BEGIN, TxnState.IN_TRANSACTION),
        (TxnEvent.FAIL_ABORTABLE, TxnState.ABORTABLE_ERROR),
        (TxnEvent.ABORT, TxnState.ABORTING_TRANSACTION),
        (TxnEvent.BUMP_EPOCH, TxnState.INITIALIZING),
        (TxnEvent.INITIALIZED, TxnState.READY),
    ]:
        assert tm.transition(event) is state


def test_fatal_is_terminal_and_reachable_from_everywhere():
    for state in TxnState:
        assert TRANSITIONS[(state, TxnEvent.FAIL_FATAL)] is TxnState.FATAL_ERROR
    assert {e for (s, e) in TRANSITIONS if s is TxnState.FATAL_ERROR} == {TxnEvent.FAIL_FATAL}


def test_commit_before_begin_tells_the_user_what_to_do():
    tm = manager_in(TxnState.READY)
    with pytest.raises(IllegalTransactionStateError, match="call begin_transaction"):
        tm.transition(TxnEvent.COMMIT)


def test_send_checks_name_the_remedy():
    tm = manager_in(TxnState.READY)
    with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
        tm.check_can_send()
    tm.state = TxnState.IN_TRANSACTION
    tm.check_can_send()
    tm.transition(TxnEvent.FAIL_ABORTABLE, RuntimeError("lost sequence"))
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        tm.check_can_send()
    fenced = ProducerFencedError("fenced")
    tm.transition(TxnEvent.FAIL_FATAL, fenced)
    with pytest.raises(ProducerFencedError):
        tm.check_can_send()
    TransactionManager(None).check_can_send()  # idempotent producers are never refused


def test_partitions_are_added_once_per_transaction():
    tm = manager_in(TxnState.IN_TRANSACTION)
    tm.maybe_add_partition(("t", 1))
    tm.maybe_add_partition(("t", 0))
    assert tm.partitions_to_add() == [("t", 0), ("t", 1)]
    assert not tm.is_partition_added(("t", 0))
    tm.partitions_added([("t", 0), ("t", 1)])
    assert tm.partitions_to_add() == [] and tm.is_partition_added(("t", 0)) and tm.started_on_coordinator
    tm.maybe_add_partition(("t", 0))
    assert tm.partitions_to_add() == []
    tm.transition(TxnEvent.COMMIT)
    tm.transition(TxnEvent.ENDED)
    assert not tm.is_partition_added(("t", 0)) and not tm.started_on_coordinator


def test_constructible_without_an_event_loop():
    tm = TransactionManager("tx", 1234)
    assert tm.state is TxnState.UNINITIALIZED and tm.transaction_timeout_ms == 1234
