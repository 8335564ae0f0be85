"""Transaction version 2 (KIP-890 part 2): an epoch bump on every EndTxn."""

from dataclasses import replace

import pytest

from onceflow.broker.txn import ProducerIdAndEpoch
from onceflow.broker.txn.log_format import decode_value, encode_value
from onceflow.broker.txn.metadata import MAX_EPOCH, TV_2
from onceflow.protocol.errors import InvalidTxnState, ProducerFenced

from .fakes import make_rig, run

T = 60_000


async def _open(rig, tid="app", partitions=(("out", 0),)):
    pid = await rig.coordinator.init_producer_id(tid, T)
    await rig.coordinator.add_partitions_to_txn(tid, pid.producer_id, pid.producer_epoch, partitions, TV_2)
    return pid


def _end(rig, pid, commit, tid="app"):
    return run(rig.coordinator.end_txn(tid, pid.producer_id, pid.producer_epoch, commit, TV_2))


def test_end_txn_bumps_the_epoch_and_markers_carry_the_new_one():
    rig = make_rig()
    pid = run(_open(rig))
    after = _end(rig, pid, commit=True)
    assert after == ProducerIdAndEpoch(pid.producer_id, pid.producer_epoch + 1)
    assert rig.markers.written[-1].producer_epoch == after.producer_epoch
    assert rig.markers.written[-1].transaction_version == TV_2
    md = rig.coordinator.state.get("app")
    assert (md.state.kafka_name, md.producer_epoch, md.last_producer_epoch) == (
        "CompleteCommit",
        after.producer_epoch,
        pid.producer_epoch,
    )


def test_retry_of_a_completed_end_txn_is_success_without_a_write():
    rig = make_rig()
    pid = run(_open(rig))
    after = _end(rig, pid, commit=True)
    writes = len(rig.log.records)
    assert _end(rig, pid, commit=True) == after
    assert len(rig.log.records) == writes
    with pytest.raises(InvalidTxnState):
        _end(rig, pid, commit=False)  # a retry with the other outcome


def test_delayed_end_txn_cannot_touch_the_next_transaction():
    """KAFKA-17754: an EndTxn(abort) of transaction N arriving while N+1 is open is fenced."""
    rig = make_rig()
    pid = run(_open(rig))
    nxt = _end(rig, pid, commit=True)
    run(rig.coordinator.add_partitions_to_txn("app", nxt.producer_id, nxt.producer_epoch, [("out", 1)], TV_2))
    with pytest.raises(ProducerFenced):
        _end(rig, pid, commit=False)  # the delayed request, old epoch
    md = rig.coordinator.state.get("app")
    assert md.state.kafka_name == "Ongoing" and md.topic_partitions == {("out", 1)}
    assert _end(rig, nxt, commit=True).producer_epoch == nxt.producer_epoch + 1


def test_abort_with_nothing_added_bumps_the_epoch_without_markers():
    rig = make_rig()
    pid = run(rig.coordinator.init_producer_id("app", T))
    after = _end(rig, pid, commit=False)
    assert after.producer_epoch == pid.producer_epoch + 1
    assert rig.markers.written == []
    assert rig.log.states_of("app")[-2:] == ["PrepareAbort", "CompleteAbort"]
    with pytest.raises(InvalidTxnState):
        _end(rig, after, commit=True)  # commit with nothing to commit


def test_empty_state_rejects_a_retry_epoch_as_fenced():
    rig = make_rig()
    run(rig.coordinator.init_producer_id("app", T))
    pid = run(rig.coordinator.init_producer_id("app", T))  # Empty at epoch 1
    with pytest.raises(ProducerFenced):
        _end(rig, ProducerIdAndEpoch(pid.producer_id, pid.producer_epoch - 1), commit=False)


def test_exhausted_epoch_hands_over_to_a_new_producer_id_at_completion():
    rig = make_rig()
    pid = run(_open(rig))
    _reload_at_epoch(rig, MAX_EPOCH - 1)
    old = ProducerIdAndEpoch(pid.producer_id, MAX_EPOCH - 1)
    after = _end(rig, old, commit=True)
    assert after.producer_epoch == 0 and after.producer_id != pid.producer_id
    assert rig.markers.written[-1].producer_epoch == MAX_EPOCH  # the last fence-proof epoch of the old id
    md = rig.coordinator.state.get("app")
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id) == (
        after.producer_id,
        0,
        pid.producer_id,
    )
    assert _end(rig, old, commit=True) == after  # a retry across the rotation


def _reload_at_epoch(rig, epoch):
    partition, key, value = rig.log.records[-1]
    rig.log.records.append((partition, key, encode_value(replace(decode_value(value), producer_epoch=epoch))))
    rig.coordinator.begin_loading(coordinator_epoch=1)
    rig.coordinator.load_from_records(rig.log.key_values())
