"""ProducerStateManager rules one by one, the seed's sequence flows, and a model-based property test."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.log.producer_entry import NUM_BATCHES_TO_RETAIN, sequence_after, sequence_before
from onceflow.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
)
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidProducerEpoch,
    InvalidTxnState,
    KafkaError,
    OutOfOrderSequence,
)

TP = "t-0"
PID = 7
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Appended:
    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int
    transactional: bool


class FakePartition:
    """What Log.append / Log.recover do with producer state; a list of batch descriptions is the log."""

    def __init__(self, state: ProducerStateManager | None = None) -> None:
        self.state = state or ProducerStateManager(TP)
        self.log: list[Appended] = []

    @property
    def log_end(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0

    def produce(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        *,
        pid: int = PID,
        timestamp: int = 1000,
        transactional: bool = False,
    ) -> tuple[int, int, bool]:
        """(first offset, last offset, duplicate?) of a client batch; raises the Kafka error on rejection."""
        duplicate = self.state.find_duplicate_batch(pid, epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset, True
        first_offset = self.log_end
        last_offset = first_offset + (last_seq - first_seq) % 2**31
        info = self.state.prepare_update(pid, AppendOrigin.CLIENT)
        info.append_data_batch(
            epoch, first_seq, last_seq, timestamp, first_offset, last_offset, transactional
        )
        self.log.append(
            Appended(pid, epoch, first_seq, last_seq, first_offset, last_offset, timestamp, transactional)
        )
        self.state.update(info)
        self.state.update_map_end_offset(last_offset + 1)
        return first_offset, last_offset, False

    def restart(self, directory: Path) -> int:
        """A new manager recovered from the newest snapshot plus a replay of the log after it."""
        state = ProducerStateManager(TP, producer_id_expiration_ms=self.state.producer_id_expiration_ms)
        replay_from = state.truncate_and_reload(0, self.log_end, directory)
        for batch in self.log:
            if batch.first_offset < replay_from:
                continue
            info = state.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
            info.append_data_batch(
                batch.epoch,
                batch.first_seq,
                batch.last_seq,
                batch.timestamp,
                batch.first_offset,
                batch.last_offset,
                batch.transactional,
            )
            state.update(info)
            state.update_map_end_offset(batch.last_offset + 1)
        self.state = state
        return replay_from


def produce_batches(partition: FakePartition, count: int, *, size: int = 3, epoch: int = 0) -> list[tuple]:
    """Append ``count`` consecutive batches of ``size`` records; their (first_seq, last_seq, offsets)."""
    out = []
    entry = partition.state.last_entry(PID)
    seq = 0 if entry is None or entry.epoch != epoch else sequence_after(entry.last_seq)
    for _ in range(count):
        last = sequence_after(seq, size - 1)
        first_offset, last_offset, dup = partition.produce(epoch, seq, last)
        assert not dup
        out.append((seq, last, first_offset, last_offset))
        seq = sequence_after(last)
    return out


# -- duplicates and the five-batch window --------------------------------------------------------


@pytest.mark.parametrize("newest", [1, 2, 3, 4, 5])
def test_resend_of_any_of_the_five_newest_batches_is_a_duplicate_with_its_original_offsets(newest):
    partition = FakePartition()
    batches = produce_batches(partition, 7)
    log_end = partition.log_end
    first_seq, last_seq, first_offset, last_offset = batches[-newest]
    assert partition.produce(0, first_seq, last_seq) == (first_offset, last_offset, True)
    assert partition.log_end == log_end
    assert partition.state.last_entry(PID).last_seq == batches[-1][1]


def test_resend_of_the_sixth_newest_batch_is_out_of_order():
    partition = FakePartition()
    batches = produce_batches(partition, 6)
    first_seq, last_seq, _, _ = batches[-6]
    with pytest.raises(OutOfOrderSequence) as raised:
        partition.produce(0, first_seq, last_seq)
    assert raised.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert len(partition.state.last_entry(PID).batches) == NUM_BATCHES_TO_RETAIN


def test_partial_overlap_with_a_cached_batch_is_out_of_order():
    partition = FakePartition()
    produce_batches(partition, 2, size=5)  # sequences 0..4, 5..9
    with pytest.raises(OutOfOrderSequence):
        partition.produce(0, 7, 12)
    with pytest.raises(OutOfOrderSequence):
        partition.produce(0, 5, 8)  # same start, different end: not the cached batch
    assert partition.log_end == 10


def test_gap_is_out_of_order_and_the_message_names_producer_partition_and_both_sequences():
    partition = FakePartition()
    produce_batches(partition, 1, size=125)  # 0..124 at offsets 0..124
    with pytest.raises(OutOfOrderSequence) as raised:
        partition.produce(0, 130, 131)
    message = str(raised.value)
    assert "producer 7" in message
    assert "offset 125" in message
    assert "partition t-0" in message
    assert "130 (incoming seq. number)" in message
    assert "124 (current end sequence number)" in message
    assert partition.log_end == 125


def test_next_sequence_after_int32_max_is_zero():
    partition = FakePartition()
    # an unknown producer may start anywhere (KIP-360): start just below the wrap point
    assert partition.produce(0, INT32_MAX - 4, INT32_MAX)[2] is False
    with pytest.raises(OutOfOrderSequence):
        partition.produce(0, 1, 5)  # skips 0
    assert partition.produce(0, 0, 9) == (5, 14, False)
    # a batch that itself wraps, and its resend
    partition2 = FakePartition()
    partition2.produce(0, INT32_MAX - 9, INT32_MAX - 2)
    assert partition2.produce(0, INT32_MAX - 1, 1) == (8, 11, False)
    assert partition2.produce(0, INT32_MAX - 1, 1) == (8, 11, True)
    assert partition2.produce(0, 2, 2) == (12, 12, False)


def test_sequence_arithmetic_wraps_both_ways():
    assert sequence_after(INT32_MAX) == 0
    assert sequence_after(INT32_MAX - 1, 5) == 3
    assert sequence_before(0) == INT32_MAX
    assert sequence_before(3, 5) == INT32_MAX - 1


# -- epochs and unknown producers ---------------------------------------------------------------


def test_older_epoch_is_invalid_producer_epoch():
    partition = FakePartition()
    produce_batches(partition, 1, epoch=3)
    with pytest.raises(InvalidProducerEpoch) as raised:
        partition.produce(2, 3, 5)
    assert raised.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert "is 2, which is smaller than the last seen epoch 3" in str(raised.value)


def test_new_epoch_must_start_at_sequence_zero():
    partition = FakePartition()
    produce_batches(partition, 2)
    with pytest.raises(OutOfOrderSequence) as raised:
        partition.produce(1, 6, 8)
    assert "new epoch" in str(raised.value)
    assert partition.state.last_entry(PID).epoch == 0


def test_new_epoch_at_zero_replaces_the_cached_batches():
    partition = FakePartition()
    old = produce_batches(partition, 2)
    assert partition.produce(1, 0, 2) == (6, 8, False)
    entry = partition.state.last_entry(PID)
    assert (entry.epoch, len(entry.batches), entry.last_seq) == (1, 1, 2)
    # a resend from the old epoch is no longer a duplicate: it is fenced
    with pytest.raises(InvalidProducerEpoch):
        partition.produce(0, old[0][0], old[0][1])


def test_unknown_producer_may_start_at_any_sequence():
    partition = FakePartition()
    assert partition.produce(5, 4242, 4250) == (0, 8, False)
    entry = partition.state.last_entry(PID)
    assert (entry.epoch, entry.first_seq, entry.last_seq) == (5, 4242, 4250)
    with pytest.raises(OutOfOrderSequence):
        partition.produce(5, 4252, 4253)


def test_later_batch_of_the_same_append_is_checked_against_the_earlier_one():
    state = ProducerStateManager(TP)
    info = state.prepare_update(PID, AppendOrigin.CLIENT)
    info.append_data_batch(0, 100, 104, 1000, 0, 4, False)
    with pytest.raises(OutOfOrderSequence):
        info.append_data_batch(0, 200, 201, 1000, 5, 6, False)
    info.append_data_batch(0, 105, 106, 1000, 5, 6, False)
    state.update(info)
    assert [b.first_seq for b in state.last_entry(PID).batches] == [100, 105]


def test_replication_origin_skips_sequence_checks_and_only_logs_old_epochs(caplog):
    partition = FakePartition()
    produce_batches(partition, 1, epoch=2)
    info = partition.state.prepare_update(PID, AppendOrigin.REPLICATION)
    info.append_data_batch(2, 50, 52, 1000, 3, 5, False)  # a gap: accepted on replay
    with caplog.at_level(logging.WARNING, logger="onceflow.log.producer_append_info"):
        info.append_data_batch(1, 0, 0, 1000, 6, 6, False)  # an older epoch: warned about
    assert "smaller than the last seen epoch 2" in caplog.text
    partition.state.update(info)
    assert partition.state.last_entry(PID).last_seq == 0


def test_coordinator_origin_checks_epoch_but_not_sequence():
    state = ProducerStateManager(TP)
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    info.append_data_batch(4, 0, 0, 1000, 0, 0, False)
    state.update(info)
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    info.append_data_batch(4, 9, 9, 1000, 1, 1, False)
    with pytest.raises(InvalidProducerEpoch):
        state.prepare_update(PID, AppendOrigin.COORDINATOR).append_data_batch(3, 10, 10, 1000, 2, 2, False)


# -- prepare, then update -----------------------------------------------------------------------


def test_prepare_update_changes_nothing_until_update():
    partition = FakePartition()
    produce_batches(partition, 2)
    state = partition.state
    before = (
        state.last_entry(PID),
        state.active_producers(),
        state.first_unstable_offset(),
        state.map_end_offset,
    )
    info = state.prepare_update(PID, AppendOrigin.CLIENT)
    info.append_data_batch(0, 6, 8, 2000, 6, 8, True)
    other = state.prepare_update(99, AppendOrigin.CLIENT)
    other.append_data_batch(0, 0, 0, 2000, 9, 9, False)
    after = (
        state.last_entry(PID),
        state.active_producers(),
        state.first_unstable_offset(),
        state.map_end_offset,
    )
    assert after == before
    assert state.last_entry(99) is None
    assert state.find_duplicate_batch(PID, 0, 6, 8) is None
    assert info.to_entry().current_txn_first_offset == 6  # the info itself did record it


def test_rejected_batch_leaves_no_trace_in_the_info_or_the_manager():
    partition = FakePartition()
    produce_batches(partition, 1)
    info = partition.state.prepare_update(PID, AppendOrigin.CLIENT)
    with pytest.raises(OutOfOrderSequence):
        info.append_data_batch(0, 10, 12, 1000, 3, 5, False)
    assert info.to_entry().batches == ()
    assert partition.state.last_entry(PID).last_seq == 2


# -- expiration ---------------------------------------------------------------------------------


def test_idle_producer_expires_after_producer_id_expiration_ms_and_may_then_restart_anywhere():
    state = ProducerStateManager(TP, producer_id_expiration_ms=1000)
    partition = FakePartition(state)
    partition.produce(0, 0, 4, timestamp=10_000)
    assert state.remove_expired_producers(10_999) == []
    assert state.last_entry(PID) is not None
    assert state.remove_expired_producers(11_000) == [PID]
    assert state.last_entry(PID) is None
    assert partition.produce(0, 77, 78)[2] is False  # unknown again: any sequence


def test_default_expiration_is_kafkas_one_day():
    assert ProducerStateManager(TP).producer_id_expiration_ms == 86_400_000


def test_producer_with_an_open_transaction_never_expires():
    state = ProducerStateManager(TP, producer_id_expiration_ms=1000)
    partition = FakePartition(state)
    partition.produce(0, 0, 4, timestamp=10_000, transactional=True)
    partition.produce(0, 0, 0, pid=8, timestamp=10_000)
    assert state.remove_expired_producers(10_000_000) == [8]
    assert state.last_entry(PID).current_txn_first_offset == 0


# -- transactions (the parts the transactions work builds on) -----------------------------------


def test_transactional_batches_track_the_first_offset_until_the_marker_completes_it():
    partition = FakePartition()
    partition.produce(0, 0, 9, pid=1)  # offsets 0..9, not transactional
    partition.produce(0, 0, 4, transactional=True)  # offsets 10..14
    partition.produce(0, 5, 6, transactional=True)  # offsets 15..16
    state = partition.state
    assert state.first_unstable_offset() == 10
    assert state.last_entry(PID).current_txn_first_offset == 10
    with pytest.raises(InvalidTxnState):
        partition.produce(0, 7, 7)  # non-transactional write inside the transaction
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    completed = info.append_end_txn_marker(
        is_commit=False, coordinator_epoch=3, epoch=0, offset=17, timestamp=2000
    )
    assert completed == CompletedTxn(PID, 10, 17, is_aborted=True)
    state.update(info)
    state.update_map_end_offset(18)
    state.complete_txn(completed)
    assert state.first_unstable_offset() is None
    entry = state.last_entry(PID)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_seq) == (None, 3, 6)


def test_marker_from_an_older_coordinator_epoch_is_fenced():
    partition = FakePartition()
    partition.produce(0, 0, 0, transactional=True)
    state = partition.state
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    info.append_end_txn_marker(is_commit=True, coordinator_epoch=5, epoch=0, offset=1, timestamp=1)
    state.update(info)
    with pytest.raises(KafkaError) as raised:
        state.prepare_update(PID, AppendOrigin.COORDINATOR).append_end_txn_marker(
            is_commit=True, coordinator_epoch=4, epoch=0, offset=2, timestamp=1
        )
    assert raised.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_active_producers_describe_each_producer():
    partition = FakePartition()
    partition.produce(2, 0, 4, pid=9, timestamp=500)
    partition.produce(1, 10, 11, pid=3, timestamp=600, transactional=True)
    described = [
        (
            e.producer_id,
            e.epoch,
            e.last_seq,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in partition.state.active_producers()
    ]
    assert described == [(3, 1, 11, 600, -1, 5), (9, 2, 4, 500, -1, None)]


# -- the seed's figures 2-5 (sequences A/114..120 ... F/151..155) --------------------------------

SEED_BATCHES = {
    "A": (114, 120),
    "B": (121, 124),
    "C": (125, 132),
    "D": (133, 142),
    "E": (143, 150),
    "F": (151, 155),
}


def seed_partition() -> FakePartition:
    """A producer that has already written sequences 0..113 at offsets 0..113."""
    partition = FakePartition()
    partition.produce(0, 0, 113)
    return partition


def test_seed_figure_2_all_batches_succeed():
    partition = seed_partition()
    for name in "ABCDE":
        first, last = SEED_BATCHES[name]
        assert partition.produce(0, first, last) == (first, last, False)  # offsets == sequences here
    assert partition.log_end == 151


def test_seed_figure_3_lost_acks_resent_batches_are_duplicates_with_original_offsets():
    partition = seed_partition()
    for name in "ABCDE":
        partition.produce(0, *SEED_BATCHES[name])
    for name in "DE":  # their ACKs were lost: the producer resends with the same sequences
        first, last = SEED_BATCHES[name]
        assert partition.produce(0, first, last) == (first, last, True)
    assert partition.log_end == 151


def test_seed_figure_4_lost_batch_makes_the_following_ones_out_of_order():
    partition = seed_partition()
    partition.produce(0, *SEED_BATCHES["A"])
    partition.produce(0, *SEED_BATCHES["B"])
    for name in "DE":  # C never arrived
        with pytest.raises(OutOfOrderSequence):
            partition.produce(0, *SEED_BATCHES[name])
    assert partition.log_end == 125
    # the producer bumps its epoch and resends C, D, E with sequences from 0
    assert partition.produce(1, 0, 7) == (125, 132, False)
    assert partition.produce(1, 8, 17) == (133, 142, False)
    assert partition.produce(1, 18, 25) == (143, 150, False)


def test_seed_figure_5_six_in_flight_resend_of_a_misses_the_cache_and_is_stored_twice():
    partition = seed_partition()
    for name in "ABCDEF":
        partition.produce(0, *SEED_BATCHES[name])
    with pytest.raises(OutOfOrderSequence):
        partition.produce(0, *SEED_BATCHES["A"])  # A fell out of the five-batch window
    # the producer bumps the epoch and resends A from sequence 0: the broker cannot tell it is a copy
    assert partition.produce(1, 0, 6) == (156, 162, False)
    stored_a = [b for b in partition.log if b.last_offset - b.first_offset == 6]
    assert [(b.epoch, b.first_offset) for b in stored_a] == [(0, 114), (1, 156)]


# -- model-based property test -------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("next"), st.integers(1, 4)),
        st.tuples(st.just("resend"), st.integers(1, 7)),
        st.tuples(st.just("gap"), st.integers(1, 3)),
        st.tuples(st.just("overlap"), st.integers(1, 5)),
        st.tuples(st.just("bump"), st.integers(1, 3)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
    ),
    max_size=40,
)
start_sequences = st.one_of(st.just(0), st.integers(INT32_MAX - 12, INT32_MAX), st.integers(0, INT32_MAX))


@settings(max_examples=150, deadline=None)
@given(start=start_sequences, ops=operations)
def test_model_agrees_with_the_manager_across_appends_resends_gaps_and_restarts(start, ops):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        partition = FakePartition()
        epoch = 0
        # the model: this epoch's accepted batches (first_seq, last_seq, first_offset, last_offset)
        history: list[tuple[int, int, int, int]] = []
        first, last = start, sequence_after(start, 2)
        history.append((first, last, *partition.produce(epoch, first, last)[:2]))
        for op, arg in ops:
            next_seq = sequence_after(history[-1][1]) if history else 0
            if op == "next":
                last = sequence_after(next_seq, arg - 1)
                result = partition.produce(epoch, next_seq, last)
                assert result == (partition.log_end - arg, partition.log_end - 1, False)
                history.append((next_seq, last, result[0], result[1]))
            elif op == "resend" and arg <= len(history):
                first, last, first_offset, last_offset = history[-arg]
                if arg <= NUM_BATCHES_TO_RETAIN:
                    assert partition.produce(epoch, first, last) == (first_offset, last_offset, True)
                else:
                    with pytest.raises(OutOfOrderSequence):
                        partition.produce(epoch, first, last)
            elif op == "gap":
                with pytest.raises(OutOfOrderSequence):
                    partition.produce(epoch, sequence_after(next_seq, arg), sequence_after(next_seq, arg + 2))
            elif op == "overlap" and history and history[-1][0] != history[-1][1]:
                first = sequence_after(history[-1][0], 1)  # inside the newest batch, not its start
                with pytest.raises(OutOfOrderSequence):
                    partition.produce(epoch, first, sequence_after(next_seq, arg))
            elif op == "bump":
                epoch += 1
                result = partition.produce(epoch, 0, arg - 1)
                assert result[2] is False
                history = [(0, arg - 1, result[0], result[1])]
            elif op == "roll":
                partition.state.take_snapshot(directory)
            elif op == "restart":  # clean shutdown: snapshot at the log end, nothing to replay
                partition.state.take_snapshot(directory)
                assert partition.restart(directory) == partition.log_end
            elif op == "crash":  # newest snapshot is from an earlier roll (or none): replay the rest
                partition.restart(directory)
        entry = partition.state.last_entry(PID)
        assert entry.epoch == epoch
        assert [(b.first_seq, b.last_seq) for b in entry.batches] == [h[:2] for h in history[-5:]]
        assert entry.batches[-1] == BatchMetadata(*history[-1], timestamp=1000)
