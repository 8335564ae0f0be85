"""KIP-939 at the coordinator: enable2Pc behind the broker's switch, no timeout for a two-phase
commit transaction, keepPreparedTxn handing the open transaction to a new producer, and a reload of
``__transaction_state`` keeping all of it."""

import pytest

from onceflow.broker.txn import ProducerIdAndEpoch, TransactionConfig
from onceflow.broker.txn.errors import TwoPhaseCommitNotAllowed
from onceflow.broker.txn.metadata import TWO_PHASE_COMMIT_TIMEOUT_MS
from onceflow.protocol.errors import (
    ConcurrentTransactions,
    ErrorCode,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
)

from .fakes import make_rig, run

T = 60_000
ENABLED = TransactionConfig(transaction_two_phase_commit_enable=True)
PARTITIONS = [("out", 0), ("out", 1)]


async def _prepared(rig, tid="task-0"):
    """A two-phase commit producer's transaction with records on two partitions (prepared: the
    broker cannot tell prepared from still writing, and needs not)."""
    pid = await rig.coordinator.init_producer_id(tid, T, enable_2pc=True)
    await rig.coordinator.add_partitions_to_txn(tid, pid.producer_id, pid.producer_epoch, PARTITIONS)
    return pid


def test_two_phase_commit_is_refused_unless_the_broker_allows_it():
    rig = make_rig()  # Kafka's default: transaction.two.phase.commit.enable=false
    with pytest.raises(TwoPhaseCommitNotAllowed) as info:
        run(rig.coordinator.init_producer_id("task-0", T, enable_2pc=True))
    assert info.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with pytest.raises(TwoPhaseCommitNotAllowed):
        run(rig.coordinator.init_keeping_prepared_txn("task-0"))
    assert rig.log.records == []  # nothing was written for the refused producer
    assert run(rig.coordinator.init_producer_id("task-0", T)).producer_epoch == 0  # ordinary use is fine


def test_two_phase_commit_needs_a_transactional_id():
    rig = make_rig(config=ENABLED)
    with pytest.raises(InvalidRequest):
        run(rig.coordinator.init_producer_id(None, T, enable_2pc=True))


def test_a_two_phase_commit_transaction_is_never_aborted_by_its_timeout():
    rig = make_rig(config=ENABLED)
    run(_prepared(rig, "two-phase"))
    ordinary = run(rig.coordinator.init_producer_id("ordinary", T))
    run(rig.coordinator.add_partitions_to_txn("ordinary", ordinary.producer_id, 0, PARTITIONS))
    assert rig.coordinator.state.get("two-phase").txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    rig.clock.advance(30 * 24 * 3600 * 1000)  # a month
    assert run(rig.coordinator.abort_timed_out_transactions()) == ["ordinary"]
    assert rig.coordinator.state.get("two-phase").state.kafka_name == "Ongoing"
    assert all(m.transactional_id == "ordinary" for m in rig.markers.written)


def test_the_transaction_timeout_of_a_two_phase_commit_producer_is_not_checked():
    rig = make_rig(config=ENABLED)
    # Kafka's client sends its default timeout (or none at all) with enable2Pc: no bound applies.
    assert run(rig.coordinator.init_producer_id("t", 10**9, enable_2pc=True)).producer_epoch == 0


def test_keep_prepared_txn_hands_the_open_transaction_to_the_new_producer():
    rig = make_rig(config=ENABLED)
    old = run(_prepared(rig))
    new, ongoing = run(rig.coordinator.init_keeping_prepared_txn("task-0"))
    assert ongoing == old  # the producer id and epoch that wrote the open transaction
    assert new == ProducerIdAndEpoch(old.producer_id, old.producer_epoch + 1)
    metadata = rig.coordinator.state.get("task-0")
    assert metadata.state.kafka_name == "Ongoing" and metadata.topic_partitions == set(PARTITIONS)
    assert rig.markers.written == []  # nothing aborted
    # The writer of the transaction is fenced: it can neither add to it nor end it.
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.end_txn("task-0", old.producer_id, old.producer_epoch, commit=True))
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.add_partitions_to_txn("task-0", old.producer_id, old.producer_epoch, [("x", 0)]))
    # The new producer commits it: the markers reach both partitions.
    run(rig.coordinator.end_txn("task-0", new.producer_id, new.producer_epoch, commit=True))
    [marker] = rig.markers.written
    assert marker.commit and marker.partitions == set(PARTITIONS)
    assert rig.log.states_of("task-0")[-2:] == ["PrepareCommit", "CompleteCommit"]


def test_keep_prepared_txn_with_nothing_open_is_an_ordinary_init():
    rig = make_rig(config=ENABLED)
    first = run(rig.coordinator.init_producer_id("task-0", T, enable_2pc=True))
    new, ongoing = run(rig.coordinator.init_keeping_prepared_txn("task-0"))
    assert ongoing is None and new == ProducerIdAndEpoch(first.producer_id, first.producer_epoch + 1)
    brand_new, ongoing = run(rig.coordinator.init_keeping_prepared_txn("never-seen"))
    assert ongoing is None and brand_new.producer_epoch == 0


def test_init_without_keep_prepared_txn_aborts_a_two_phase_commit_transaction():
    rig = make_rig(config=ENABLED)
    old = run(_prepared(rig))
    with pytest.raises(ConcurrentTransactions):
        run(rig.coordinator.init_producer_id("task-0", T, enable_2pc=True))
    [marker] = rig.markers.written
    assert not marker.commit and marker.producer_epoch == old.producer_epoch + 1


def test_an_ordinary_open_transaction_cannot_be_kept():
    rig = make_rig(config=ENABLED)
    pid = run(rig.coordinator.init_producer_id("task-0", T))
    run(rig.coordinator.add_partitions_to_txn("task-0", pid.producer_id, pid.producer_epoch, PARTITIONS))
    with pytest.raises(InvalidTxnState):
        run(rig.coordinator.init_keeping_prepared_txn("task-0"))
    assert rig.coordinator.state.get("task-0").producer_epoch == pid.producer_epoch  # untouched


def test_a_kept_transaction_survives_a_reload_of_the_transaction_log():
    rig = make_rig(config=ENABLED)
    old = run(_prepared(rig))
    new, _ = run(rig.coordinator.init_keeping_prepared_txn("task-0"))
    reloaded = make_rig(config=ENABLED, log=rig.log)
    metadata = reloaded.coordinator.state.get("task-0")
    assert metadata.is_two_phase_commit and metadata.state.kafka_name == "Ongoing"
    assert metadata.producer_epoch == new.producer_epoch
    # Still kept after the reload (a second takeover fences the first one again).
    again, ongoing = run(reloaded.coordinator.init_keeping_prepared_txn("task-0"))
    assert ongoing == new and again.producer_epoch == old.producer_epoch + 2
    reloaded.clock.advance(10**10)
    assert run(reloaded.coordinator.abort_timed_out_transactions()) == []


def test_describe_and_list_show_a_two_phase_commit_transaction_and_its_start():
    rig = make_rig(config=ENABLED)
    start = rig.clock.now
    run(_prepared(rig))
    rig.clock.advance(5000)
    [described] = rig.coordinator.describe_transactions(["task-0"])
    assert described.state == "Ongoing"
    assert described.transaction_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    assert described.transaction_start_time_ms == start
    listed = rig.coordinator.list_transactions(["Ongoing"], (), 4000).transactions
    assert [t.transactional_id for t in listed] == ["task-0"]
