"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (transaction version 1)."""

import asyncio
from dataclasses import replace

import pytest

from onceflow.broker.txn import ProducerIdAndEpoch, TransactionConfig
from onceflow.broker.txn.config import java_string_hash, partition_for_key
from onceflow.broker.txn.errors import InvalidTransactionTimeout, fenced_error_code, wire_code
from onceflow.broker.txn.log_format import decode_key, decode_value, encode_value
from onceflow.broker.txn.metadata import MAX_EPOCH
from onceflow.protocol.errors import (
    ConcurrentTransactions,
    ErrorCode,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    KafkaError,
    NotCoordinator,
    ProducerFenced,
)

from .fakes import make_rig, run

T = 60_000


async def _begin(rig, tid="app", partitions=(("out", 0), ("out", 1))):
    pid = await rig.coordinator.init_producer_id(tid, T)
    await rig.coordinator.add_partitions_to_txn(tid, pid.producer_id, pid.producer_epoch, partitions)
    return pid


def test_idempotent_producer_gets_a_fresh_id_at_epoch_0():
    rig = make_rig()
    a = run(rig.coordinator.init_producer_id(None, T))
    b = run(rig.coordinator.init_producer_id(None, T))
    assert a.producer_epoch == b.producer_epoch == 0 and a.producer_id != b.producer_id
    assert rig.log.records == []  # nothing persisted for idempotent producers


def test_new_id_starts_at_epoch_0_and_each_init_bumps_it():
    rig = make_rig()
    first = run(rig.coordinator.init_producer_id("app", T))
    second = run(rig.coordinator.init_producer_id("app", T))
    assert first == ProducerIdAndEpoch(1000, 0)
    assert second == ProducerIdAndEpoch(1000, 1)
    assert rig.log.states_of("app") == ["Empty", "Empty"]


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_transaction_timeout_is_checked_against_the_max(timeout):
    rig = make_rig()
    with pytest.raises(InvalidTransactionTimeout) as info:
        run(rig.coordinator.init_producer_id("app", timeout))
    assert info.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert run(rig.coordinator.init_producer_id("app", 900_000)).producer_epoch == 0


def test_empty_transactional_id_is_an_invalid_request():
    rig = make_rig()
    with pytest.raises(InvalidRequest):
        run(rig.coordinator.init_producer_id("", T))


def test_init_during_an_open_transaction_aborts_it_and_fences_the_old_producer():
    rig = make_rig()
    old = run(_begin(rig))
    with pytest.raises(ConcurrentTransactions):
        run(rig.coordinator.init_producer_id("app", T))
    [marker] = rig.markers.written
    assert not marker.commit and marker.producer_epoch == old.producer_epoch + 1
    assert marker.partitions == {("out", 0), ("out", 1)}
    assert rig.log.states_of("app")[-2:] == ["PrepareAbort", "CompleteAbort"]
    new = run(rig.coordinator.init_producer_id("app", T))  # the client's retry
    assert new == ProducerIdAndEpoch(old.producer_id, old.producer_epoch + 2)
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.end_txn("app", old.producer_id, old.producer_epoch, commit=True))
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.add_partitions_to_txn("app", old.producer_id, old.producer_epoch, [("out", 2)]))


def test_init_while_a_transaction_is_completing_is_concurrent_transactions():
    rig = make_rig()
    pid = run(_begin(rig))
    rig.markers.fail_with = NotCoordinator("broker busy")
    run(rig.coordinator.end_txn("app", pid.producer_id, pid.producer_epoch, commit=True))
    assert rig.coordinator.state.get("app").state.kafka_name == "PrepareCommit"
    with pytest.raises(ConcurrentTransactions):
        run(rig.coordinator.init_producer_id("app", T))


def test_exhausted_epoch_rotates_to_a_new_producer_id():
    rig = make_rig()
    run(rig.coordinator.init_producer_id("app", T))
    _force_epoch(rig, "app", MAX_EPOCH - 1)
    rotated = run(rig.coordinator.init_producer_id("app", T))
    assert rotated.producer_epoch == 0 and rotated.producer_id != 1000
    assert rig.coordinator.state.get("app").previous_producer_id == 1000


def test_kip360_bump_with_expected_producer_and_retry():
    rig = make_rig()
    pid = run(rig.coordinator.init_producer_id("app", T))
    bumped = run(rig.coordinator.init_producer_id("app", T, pid))
    assert bumped == ProducerIdAndEpoch(pid.producer_id, 1)
    retry = run(rig.coordinator.init_producer_id("app", T, pid))  # the answer was lost; same request again
    assert retry == bumped
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.init_producer_id("app", T, ProducerIdAndEpoch(pid.producer_id + 77, 1)))
    run(rig.coordinator.init_producer_id("app", T))  # another producer takes over: last epoch forgotten
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.init_producer_id("app", T, bumped))


def test_kip360_retry_of_a_rotation_gets_the_same_new_producer_id():
    rig = make_rig()
    run(rig.coordinator.init_producer_id("app", T))
    _force_epoch(rig, "app", MAX_EPOCH - 1)
    exhausted = ProducerIdAndEpoch(1000, MAX_EPOCH - 1)
    rotated = run(rig.coordinator.init_producer_id("app", T, exhausted))
    assert rotated.producer_epoch == 0
    assert run(rig.coordinator.init_producer_id("app", T, exhausted)) == rotated


def test_add_partitions_errors():
    rig = make_rig()
    with pytest.raises(InvalidProducerIdMapping):
        run(rig.coordinator.add_partitions_to_txn("nobody", 1, 0, [("t", 0)]))
    pid = run(rig.coordinator.init_producer_id("app", T))
    with pytest.raises(InvalidProducerIdMapping):
        run(rig.coordinator.add_partitions_to_txn("app", pid.producer_id + 1, 0, [("t", 0)]))
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.add_partitions_to_txn("app", pid.producer_id, 3, [("t", 0)]))
    with pytest.raises(InvalidRequest):
        run(rig.coordinator.add_partitions_to_txn("", pid.producer_id, 0, [("t", 0)]))


def test_add_partitions_starts_the_transaction_and_skips_known_partitions():
    rig = make_rig()
    pid = run(_begin(rig, partitions=[("a", 0)]))
    md = rig.coordinator.state.get("app")
    assert md.state.kafka_name == "Ongoing" and md.txn_start_timestamp == rig.clock.now
    writes = len(rig.log.records)
    run(rig.coordinator.add_partitions_to_txn("app", pid.producer_id, pid.producer_epoch, [("a", 0)]))
    assert len(rig.log.records) == writes  # nothing new: no append
    run(rig.coordinator.add_partitions_to_txn("app", pid.producer_id, pid.producer_epoch, [("b", 3)]))
    assert rig.coordinator.state.get("app").topic_partitions == {("a", 0), ("b", 3)}


def test_add_partitions_while_another_change_is_pending_is_concurrent():
    rig = make_rig()
    pid = run(rig.coordinator.init_producer_id("app", T))

    async def race():
        first = asyncio.create_task(rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("a", 0)]))
        await asyncio.sleep(0)  # the first is now awaiting its append
        with pytest.raises(ConcurrentTransactions):
            await rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("b", 0)])
        await first

    run(race())
    assert rig.coordinator.state.get("app").topic_partitions == {("a", 0)}


def test_verify_only_reports_each_partition():
    rig = make_rig()
    pid = run(_begin(rig, partitions=[("a", 0)]))
    result = rig.coordinator.verify_partitions_in_txn("app", *_pe(pid), [("a", 0), ("a", 1)])
    assert result == {("a", 0): ErrorCode.NONE, ("a", 1): ErrorCode.TRANSACTION_ABORTABLE}
    stale = rig.coordinator.verify_partitions_in_txn(
        "app", pid.producer_id, pid.producer_epoch - 1, [("a", 0)]
    )
    assert stale == {("a", 0): ErrorCode.PRODUCER_FENCED}
    unknown = rig.coordinator.verify_partitions_in_txn("zzz", 1, 0, [("a", 0)])
    assert unknown == {("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}


def test_java_hash_and_offsets_partition():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert partition_for_key("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    rig = make_rig(config=TransactionConfig(offsets_topic_num_partitions=7))
    pid = run(rig.coordinator.init_producer_id("app", T))
    run(rig.coordinator.add_offsets_to_txn("app", *_pe(pid), "my-group"))
    expected = ("__consumer_offsets", abs(java_string_hash("my-group")) % 7)
    assert rig.coordinator.state.get("app").topic_partitions == {expected}


def test_commit_writes_markers_then_complete_and_retries_are_idempotent():
    rig = make_rig()
    pid = run(_begin(rig))
    answer = run(rig.coordinator.end_txn("app", *_pe(pid), commit=True))
    assert answer == pid  # transaction version 1: same id and epoch
    [marker] = rig.markers.written
    assert marker.commit and (marker.producer_id, marker.producer_epoch) == (
        pid.producer_id,
        pid.producer_epoch,
    )
    assert rig.log.states_of("app") == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert run(rig.coordinator.end_txn("app", *_pe(pid), commit=True)) == pid  # retry: success, no write
    assert len(rig.log.records) == 4 and len(rig.markers.written) == 1
    with pytest.raises(InvalidTxnState):
        run(rig.coordinator.end_txn("app", *_pe(pid), commit=False))


def test_in_background_end_txn_answers_at_the_decision_and_completes_on_the_next_loop_turn():
    """The broker's mode: EndTxn returns once PrepareCommit is appended; the markers and
    CompleteCommit follow in a task that runs on the next turn of the event loop."""
    rig = make_rig(complete_in_background=True)

    async def scenario():
        pid = await _begin(rig)
        assert await rig.coordinator.end_txn("app", *_pe(pid), commit=True) == pid
        assert rig.log.states_of("app")[-1] == "PrepareCommit" and rig.markers.written == []
        # Kafka's answers while the markers are due, to the next transaction and to a retry:
        with pytest.raises(ConcurrentTransactions):
            await rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("out", 0)])
        with pytest.raises(ConcurrentTransactions):
            await rig.coordinator.end_txn("app", *_pe(pid), commit=True)
        await rig.coordinator.drain_completions()
        assert await rig.coordinator.end_txn("app", *_pe(pid), commit=True) == pid  # now a no-op retry
        assert rig.log.states_of("app")[-2:] == ["PrepareCommit", "CompleteCommit"]
        [marker] = rig.markers.written
        assert marker.commit and marker.partitions == {("out", 0), ("out", 1)}
        await rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("out", 0)])  # the next one

    run(scenario())


def test_in_background_completion_that_fails_is_finished_by_the_retry():
    rig = make_rig(complete_in_background=True)

    async def scenario():
        pid = await _begin(rig)
        rig.markers.fail_with = OSError("disk gone")
        await rig.coordinator.end_txn("app", *_pe(pid), commit=False)
        await rig.coordinator.drain_completions()
        assert rig.log.states_of("app")[-1] == "PrepareAbort" and rig.markers.written == []
        rig.markers.fail_with = None
        assert await rig.coordinator.retry_incomplete_transactions() == ["app"]
        assert rig.log.states_of("app")[-1] == "CompleteAbort" and not rig.markers.written[0].commit

    run(scenario())


def test_end_txn_errors_v1():
    rig = make_rig()
    pid = run(rig.coordinator.init_producer_id("app", T))
    with pytest.raises(InvalidTxnState):  # nothing to end
        run(rig.coordinator.end_txn("app", *_pe(pid), commit=True))
    run(rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("a", 0)]))
    with pytest.raises(ProducerFenced):
        run(rig.coordinator.end_txn("app", pid.producer_id, pid.producer_epoch + 1, commit=True))
    with pytest.raises(InvalidProducerIdMapping):
        run(rig.coordinator.end_txn("app", pid.producer_id + 1, pid.producer_epoch, commit=True))
    with pytest.raises(InvalidProducerIdMapping):
        run(rig.coordinator.end_txn("other", pid.producer_id, pid.producer_epoch, commit=True))
    run(rig.coordinator.end_txn("app", *_pe(pid), commit=False))
    assert rig.log.states_of("app")[-1] == "CompleteAbort" and not rig.markers.written[-1].commit


def test_failed_log_append_leaves_state_unchanged_and_maps_the_error():
    rig = make_rig()
    pid = run(rig.coordinator.init_producer_id("app", T))
    rig.log.fail_with = KafkaError("leader moved", ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(NotCoordinator):
        run(rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("a", 0)]))
    md = rig.coordinator.state.get("app")
    assert md.state.kafka_name == "Empty" and not md.pending_transition_in_progress
    run(rig.coordinator.add_partitions_to_txn("app", *_pe(pid), [("a", 0)]))  # works again afterwards
    assert md.state.kafka_name == "Ongoing"


def test_fenced_code_depends_on_api_version():
    assert fenced_error_code(26, 1) == ErrorCode.INVALID_PRODUCER_EPOCH  # EndTxn v1
    assert fenced_error_code(26, 2) == ErrorCode.PRODUCER_FENCED
    assert fenced_error_code(22, 3) == ErrorCode.INVALID_PRODUCER_EPOCH  # InitProducerId v3
    assert wire_code(ProducerFenced("x"), 24, 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert wire_code(ConcurrentTransactions("x"), 24, 1) == ErrorCode.CONCURRENT_TRANSACTIONS


def _pe(pid):
    return pid.producer_id, pid.producer_epoch


def _force_epoch(rig, tid, epoch):
    """Put ``tid`` at ``epoch`` the way a restart would: through the log and a reload."""
    partition, key, value = next(r for r in reversed(rig.log.records) if decode_key(r[1]) == tid)
    rig.log.records.append((partition, key, encode_value(replace(decode_value(value), producer_epoch=epoch))))
    rig.coordinator.begin_loading(coordinator_epoch=1)
    rig.coordinator.load_from_records(rig.log.key_values())
