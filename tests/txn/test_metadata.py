import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.broker.txn.errors import IllegalTxnTransition
from onceflow.broker.txn.metadata import (
    MAX_EPOCH,
    TV_0,
    TV_2,
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
    is_valid_transition,
)
from onceflow.protocol.errors import ProducerFenced

S = TransactionState


def _md(state=S.EMPTY, epoch=5, partitions=frozenset(), tv=TV_0, **kw):
    return TransactionMetadata(
        "tid",
        producer_id=100,
        producer_epoch=epoch,
        txn_timeout_ms=60_000,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp=kw.pop("start", 10 if state is not S.EMPTY else -1),
        txn_last_update_timestamp=10,
        client_transaction_version=tv,
        **kw,
    )


def test_the_table_is_kafkas():
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_ABORT] == {S.PREPARE_ABORT}
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {
        S.ONGOING,
        S.PREPARE_EPOCH_FENCE,
        S.EMPTY,
        S.COMPLETE_COMMIT,
        S.COMPLETE_ABORT,
    }
    assert set(VALID_PREVIOUS_STATES) == set(S)
    assert [s.id for s in S] == list(range(8))
    assert {s.kafka_name for s in S if s.expiration_allowed} == {"Empty", "CompleteCommit", "CompleteAbort"}


@given(st.sampled_from(list(S)), st.sampled_from(list(S)))
def test_every_state_pair_follows_the_table(current, target):
    md = _md(state=current)
    before = md.current
    if is_valid_transition(current, target):
        transition = md.prepare_transition(target)
        assert transition.state is target
        assert md.pending_state is target
        assert md.current == before  # prepare changes nothing
        if target is S.PREPARE_EPOCH_FENCE:
            with pytest.raises(IllegalTxnTransition):
                md.complete_transition(transition)
        else:
            md.complete_transition(transition)
            assert md.state is target
            assert md.pending_state is None
    else:
        with pytest.raises(IllegalTxnTransition) as info:
            md.prepare_transition(target)
        assert current.kafka_name in str(info.value) and target.kafka_name in str(info.value)
        assert md.current == before and md.pending_state is None


def test_only_one_transition_may_be_pending():
    md = _md(state=S.ONGOING, partitions=frozenset({("t", 0)}))
    md.prepare_add_partitions(frozenset({("t", 1)}), 20, TV_0)
    with pytest.raises(IllegalTxnTransition, match="pending"):
        md.prepare_abort_or_commit(True, TV_0, -1, 20)


def test_complete_needs_the_pending_transition_itself():
    md = _md(state=S.ONGOING, partitions=frozenset({("t", 0)}))
    other = _md(state=S.ONGOING, partitions=frozenset({("t", 0)})).prepare_abort_or_commit(
        False, TV_0, -1, 20
    )
    md.prepare_abort_or_commit(True, TV_0, -1, 20)
    with pytest.raises(IllegalTxnTransition, match="PrepareAbort"):
        md.complete_transition(other)
    assert md.state is S.ONGOING


def test_abort_transition_restores_and_a_later_fence_bumps_to_the_same_epoch():
    md = _md(state=S.ONGOING, partitions=frozenset({("t", 0)}))
    fence = md.prepare_fence_producer_epoch(20)
    assert (fence.state, fence.producer_epoch, fence.last_producer_epoch, fence.epoch_fence) == (
        S.PREPARE_ABORT,
        6,
        -1,
        True,
    )
    md.abort_transition(fence)
    assert md.state is S.ONGOING and md.producer_epoch == 5 and not md.pending_transition_in_progress
    again = md.prepare_fence_producer_epoch(30)
    assert again.producer_epoch == 6  # the old producer (epoch 5) is still fenced; no epoch is wasted


def test_incr_epoch_rules():
    md = _md(state=S.COMPLETE_COMMIT, epoch=5, last_producer_epoch=4)
    assert md.prepare_incr_producer_epoch(1000, None, 50).producer_epoch == 6
    md = _md(state=S.EMPTY, epoch=5, last_producer_epoch=4)
    t = md.prepare_incr_producer_epoch(1000, 5, 50)
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    md = _md(state=S.EMPTY, epoch=5, last_producer_epoch=4)
    t = md.prepare_incr_producer_epoch(1000, 4, 50)  # a retry: same epoch back
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    md = _md(state=S.EMPTY, epoch=5, last_producer_epoch=4)
    with pytest.raises(ProducerFenced):
        md.prepare_incr_producer_epoch(1000, 3, 50)
    assert not md.pending_transition_in_progress


def test_rotation_records_previous_producer_id():
    md = _md(state=S.EMPTY, epoch=MAX_EPOCH - 1)
    assert md.is_producer_epoch_exhausted
    t = md.prepare_producer_id_rotation(777, 1000, 50, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.previous_producer_id, t.last_producer_epoch) == (
        777,
        0,
        100,
        MAX_EPOCH - 1,
    )


def test_tv2_end_bumps_epoch_and_next_producer_id_takes_over_on_complete():
    md = _md(state=S.ONGOING, epoch=MAX_EPOCH - 1, partitions=frozenset({("t", 0)}), tv=TV_2)
    prepare = md.prepare_abort_or_commit(True, TV_2, 555, 20)
    assert (prepare.producer_epoch, prepare.last_producer_epoch, prepare.next_producer_id) == (
        MAX_EPOCH,
        MAX_EPOCH - 1,
        555,
    )
    md.complete_transition(prepare)
    complete = md.prepare_complete(30)
    assert (complete.state, complete.producer_id, complete.producer_epoch) == (S.COMPLETE_COMMIT, 555, 0)
    assert complete.previous_producer_id == 100 and complete.next_producer_id == -1
    md.complete_transition(complete)
    assert md.topic_partitions == frozenset()


def test_empty_abort_needs_transaction_version_2():
    with pytest.raises(IllegalTxnTransition):
        _md(state=S.EMPTY).prepare_abort_or_commit(False, TV_0, -1, 20)
    t = _md(state=S.COMPLETE_COMMIT).prepare_abort_or_commit(False, TV_2, -1, 20)
    assert (t.state, t.topic_partitions, t.txn_start_timestamp) == (S.PREPARE_ABORT, frozenset(), 20)
