"""Loading __transaction_state, completing transactions after a crash, timeouts, expiry, admin views."""

import pytest

from onceflow.broker.txn import TransactionConfig
from onceflow.broker.txn.errors import CoordinatorNotAvailable
from onceflow.protocol.errors import (
    CoordinatorLoadInProgress,
    ErrorCode,
    KafkaError,
    NotCoordinator,
    ProducerFenced,
)

from .fakes import FakeTxnLog, make_rig, run

T = 60_000


async def _open(rig, tid, partitions=(("out", 0),)):
    pid = await rig.coordinator.init_producer_id(tid, T)
    await rig.coordinator.add_partitions_to_txn(tid, pid.producer_id, pid.producer_epoch, partitions)
    return pid


def test_requests_before_and_during_loading_are_refused():
    rig = make_rig(load=False)
    with pytest.raises(NotCoordinator):
        run(rig.coordinator.init_producer_id("app", T))
    rig.coordinator.begin_loading(coordinator_epoch=3)
    with pytest.raises(CoordinatorLoadInProgress):
        run(rig.coordinator.init_producer_id("app", T))
    [desc] = rig.coordinator.describe_transactions(["app"])
    assert desc.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    rig.coordinator.load_from_records([])
    assert run(rig.coordinator.init_producer_id("app", T)).producer_epoch == 0
    rig.coordinator.shutdown()
    with pytest.raises(NotCoordinator):
        run(rig.coordinator.init_producer_id("app", T))


def test_list_transactions_lists_what_is_served_here_and_nothing_elsewhere():
    """Kafka's TransactionStateManager lists the ids of the partitions it has loaded: a broker serving
    none answers an empty list (not NOT_COORDINATOR, which made a cluster-wide listing fail on every
    broker leading no __transaction_state partition); COORDINATOR_LOAD_IN_PROGRESS while loading."""
    rig = make_rig(load=False)
    assert rig.coordinator.list_transactions().transactions == []
    rig.coordinator.begin_loading(coordinator_epoch=3)
    with pytest.raises(CoordinatorLoadInProgress):
        rig.coordinator.list_transactions()
    rig.coordinator.load_from_records([])
    run(rig.coordinator.init_producer_id("app", T))
    assert [t.transactional_id for t in rig.coordinator.list_transactions().transactions] == ["app"]
    rig.coordinator.shutdown()
    assert rig.coordinator.list_transactions().transactions == []


def test_reload_restores_every_id_as_last_written():
    rig = make_rig()
    a = run(_open(rig, "a", [("x", 0), ("y", 1)]))
    b = run(rig.coordinator.init_producer_id("b", 5000))
    run(rig.coordinator.end_txn("a", a.producer_id, a.producer_epoch, commit=True))
    run(rig.coordinator.init_producer_id("b", 5000))
    again = make_rig(log=rig.log)
    md_a, md_b = again.coordinator.state.get("a"), again.coordinator.state.get("b")
    assert (md_a.state.kafka_name, md_a.producer_id, md_a.topic_partitions) == (
        "CompleteCommit",
        a.producer_id,
        frozenset(),
    )
    assert (md_b.state.kafka_name, md_b.producer_epoch, md_b.txn_timeout_ms) == ("Empty", 1, 5000)
    assert md_b.producer_id == b.producer_id


def test_crash_between_prepare_commit_and_markers_completes_as_committed_after_reload():
    rig = make_rig()
    pid = run(_open(rig, "app", [("out", 0), ("out", 1)]))
    rig.markers.fail_with = RuntimeError("broker killed before the markers")
    # the decision is durable, so the client is told the commit succeeded
    run(rig.coordinator.end_txn("app", pid.producer_id, pid.producer_epoch, commit=True))
    assert rig.log.states_of("app")[-1] == "PrepareCommit" and rig.markers.written == []

    restarted = make_rig(log=FakeTxnLog(records=list(rig.log.records)))
    md = restarted.coordinator.state.get("app")
    assert md.state.kafka_name == "PrepareCommit" and md.topic_partitions == {("out", 0), ("out", 1)}
    assert run(restarted.coordinator.retry_incomplete_transactions()) == ["app"]
    [marker] = restarted.markers.written
    assert marker.commit and marker.partitions == {("out", 0), ("out", 1)}
    assert (marker.producer_id, marker.producer_epoch) == (pid.producer_id, pid.producer_epoch)
    assert restarted.log.states_of("app")[-1] == "CompleteCommit"
    assert run(restarted.coordinator.retry_incomplete_transactions()) == []  # nothing left


def test_failed_markers_are_retried_by_the_timer_in_the_same_process():
    rig = make_rig()
    pid = run(_open(rig, "app"))
    rig.markers.fail_with = KafkaError("disk", ErrorCode.KAFKA_STORAGE_ERROR)
    run(rig.coordinator.end_txn("app", pid.producer_id, pid.producer_epoch, commit=False))
    md = rig.coordinator.state.get("app")
    assert md.state.kafka_name == "PrepareAbort" and not md.pending_transition_in_progress
    rig.markers.fail_with = None
    assert run(rig.coordinator.retry_incomplete_transactions()) == ["app"]
    assert md.state.kafka_name == "CompleteAbort" and not rig.markers.written[-1].commit


def test_timed_out_transaction_is_aborted_and_its_producer_fenced():
    rig = make_rig()
    pid = run(_open(rig, "slow"))
    run(_open(rig, "fast"))
    rig.clock.advance(T)  # exactly the timeout: not yet expired
    assert run(rig.coordinator.abort_timed_out_transactions()) == []
    rig.clock.advance(1)
    aborted = run(rig.coordinator.abort_timed_out_transactions())
    assert sorted(aborted) == ["fast", "slow"]
    slow_marker = next(m for m in rig.markers.written if m.transactional_id == "slow")
    assert not slow_marker.commit and slow_marker.producer_epoch == pid.producer_epoch + 1
    assert rig.coordinator.state.get("slow").state.kafka_name == "CompleteAbort"
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.end_txn("slow", pid.producer_id, pid.producer_epoch, commit=True))


def test_a_failed_timeout_abort_is_tried_again():
    rig = make_rig()
    pid = run(_open(rig, "slow"))
    rig.clock.advance(T + 1)
    rig.log.fail_with = KafkaError("isr", ErrorCode.NOT_ENOUGH_REPLICAS)
    assert run(rig.coordinator.abort_timed_out_transactions()) == []
    md = rig.coordinator.state.get("slow")
    assert md.state.kafka_name == "Ongoing" and md.producer_epoch == pid.producer_epoch
    assert run(rig.coordinator.abort_timed_out_transactions()) == ["slow"]
    assert md.producer_epoch == pid.producer_epoch + 1


def test_append_errors_map_like_kafka():
    rig = make_rig()
    rig.log.fail_with = KafkaError("isr", ErrorCode.NOT_ENOUGH_REPLICAS)
    with pytest.raises(CoordinatorNotAvailable):
        run(rig.coordinator.init_producer_id("app", T))


def test_idle_ids_expire_but_never_open_ones():
    config = TransactionConfig(transactional_id_expiration_ms=10_000, transaction_max_timeout_ms=10**9)
    rig = make_rig(config=config)
    run(rig.coordinator.init_producer_id("idle", T))
    pid = run(rig.coordinator.init_producer_id("open", 10**8))
    run(rig.coordinator.add_partitions_to_txn("open", pid.producer_id, pid.producer_epoch, [("t", 0)]))
    rig.clock.advance(9_999)
    assert run(rig.coordinator.expire_transactional_ids()) == []
    rig.clock.advance(1)
    assert run(rig.coordinator.expire_transactional_ids()) == ["idle"]
    rig.clock.advance(10**7)
    assert run(rig.coordinator.expire_transactional_ids()) == []  # Ongoing is never expired
    assert rig.log.states_of("idle")[-1] == "<tombstone>"
    [desc] = rig.coordinator.describe_transactions(["idle"])
    assert desc.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    reloaded = make_rig(log=rig.log)
    assert reloaded.coordinator.state.get("idle") is None
    assert reloaded.coordinator.state.get("open").state.kafka_name == "Ongoing"
    fresh = run(reloaded.coordinator.init_producer_id("idle", T))
    assert fresh.producer_epoch == 0


def test_describe_transactions():
    rig = make_rig()
    pid = run(_open(rig, "app", [("b", 1), ("a", 2), ("a", 0)]))
    desc, missing, empty = rig.coordinator.describe_transactions(["app", "nope", ""])
    assert desc.error_code == ErrorCode.NONE and desc.state == "Ongoing"
    assert (desc.producer_id, desc.producer_epoch, desc.transaction_timeout_ms) == (pid.producer_id, 0, T)
    assert desc.transaction_start_time_ms == rig.clock.now
    assert desc.topics == {"a": [0, 2], "b": [1]}
    assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert empty.error_code == ErrorCode.INVALID_REQUEST


def test_list_transactions_filters():
    rig = make_rig()
    early = run(_open(rig, "early"))
    rig.clock.advance(5_000)
    run(_open(rig, "late"))
    run(rig.coordinator.init_producer_id("idle", T))
    everything = rig.coordinator.list_transactions()
    assert {t.transactional_id for t in everything.transactions} == {"early", "late", "idle"}
    ongoing = rig.coordinator.list_transactions(state_filters=["Ongoing", "Bogus"])
    assert {t.transactional_id for t in ongoing.transactions} == {"early", "late"}
    assert ongoing.unknown_state_filters == ["Bogus"]
    by_pid = rig.coordinator.list_transactions(producer_id_filters=[early.producer_id])
    assert [t.transactional_id for t in by_pid.transactions] == ["early"]
    assert by_pid.transactions[0].state == "Ongoing"
    long_running = rig.coordinator.list_transactions(state_filters=["Ongoing"], duration_filter_ms=4_999)
    assert [t.transactional_id for t in long_running.transactions] == ["early"]
    assert (
        rig.coordinator.list_transactions(state_filters=["Ongoing"], duration_filter_ms=5_000).transactions
        == []
    )
