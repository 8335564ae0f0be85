"""The log's side of replication: leader epochs in batches and in the cache, follower appends that keep
the leader's offsets and producer state, truncation that rebuilds producer state (KIP-101 / KIP-279),
the high watermark bounding the LSO and retention."""

from __future__ import annotations

import pytest
from tests.log.batches import make_batch, produce

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.follower_append import append_as_follower, fetched_batches
from onceflow.log.leader_epoch import CHECKPOINT_FILE
from onceflow.log.log import Log
from onceflow.protocol import records
from onceflow.protocol.errors import CorruptMessage, OutOfOrderSequence
from onceflow.protocol.record_codec import encode_batch

CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=100)
PID = 7


def open_log(path, config=CONFIG) -> Log:
    return Log.open(path, config)


def producer_batch(first_seq, count=1, *, pid=PID, epoch=0, transactional=False) -> bytearray:
    values = [(None, b"p%d-s%d" % (pid, first_seq + i)) for i in range(count)]
    return bytearray(
        encode_batch(
            values,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=first_seq,
            transactional=transactional,
        )
    )


def lead(log: Log, raw: bytearray, epoch: int):
    """A leader's client append in leader epoch ``epoch``."""
    return log.append(records.validate_produce_records(raw), leader_epoch=epoch)


def marker(log: Log, *, commit: bool, epoch: int, pid=PID, coordinator_epoch=0):
    raw = bytearray(
        records.build_control_batch(
            pid, 0, commit=commit, coordinator_epoch=coordinator_epoch, timestamp_ms=1_000
        )
    )
    return log.append(
        [(records.read_header(raw), memoryview(raw))], origin=AppendOrigin.COORDINATOR, leader_epoch=epoch
    )


def replicate(leader: Log, follower: Log):
    """One fetch: everything from the follower's log end, appended as the follower does."""
    data = (
        leader.read(follower.log_end_offset, 10**8)
        if follower.log_end_offset < leader.log_end_offset
        else b""
    )
    return append_as_follower(follower, data)


def headers(log: Log) -> list:
    return [h for h, _ in log.iter_batches(log.log_start_offset)]


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epochs.entries()]


def test_leader_appends_carry_the_leader_epoch_and_the_cache_records_each_epochs_start(tmp_path):
    log = open_log(tmp_path / "t-0")
    produce(log, make_batch(2))  # a log of one replica: the client's -1 stays, nothing is recorded
    assert headers(log)[0].partition_leader_epoch == -1 and epochs(log) == []
    lead(log, make_batch(3), epoch=0)
    lead(log, make_batch(1), epoch=0)
    marker(log, commit=True, epoch=2, pid=9)
    lead(log, make_batch(1), epoch=2)
    assert [h.partition_leader_epoch for h in headers(log)] == [-1, 0, 0, 2, 2]
    assert epochs(log) == [(0, 2), (2, 6)]
    assert [records.read_header(raw).partition_leader_epoch for raw in [log.read(2, 100)]] == [0]
    assert log.end_offset_for_epoch(0) == (0, 6)
    assert log.end_offset_for_epoch(1) == (0, 6)
    assert log.end_offset_for_epoch(2) == (2, 8)
    assert log.end_offset_for_epoch(3) is None
    log.close()
    log = open_log(tmp_path / "t-0")
    assert epochs(log) == [(0, 2), (2, 6)]
    log.close()


def test_follower_keeps_the_leaders_offsets_epochs_and_producer_state(tmp_path):
    """The seeds' first story at the log level: the follower's producer state comes from the batches it
    replicates, so as the new leader it answers the producer's retry as a duplicate, original offsets."""
    leader, follower = open_log(tmp_path / "a" / "t-0"), open_log(tmp_path / "b" / "t-0")
    lead(leader, make_batch(3), epoch=1)
    offsets = [lead(leader, producer_batch(seq * 2, 2), epoch=1) for seq in range(6)]
    assert replicate(leader, follower).last_leader_epoch == 1
    assert (follower.log_end_offset, epochs(follower)) == (leader.log_end_offset, [(1, 0)])
    assert leader.read(0, 10**8) == follower.read(0, 10**8)
    # The leader dies before answering the last batch; the follower leads in epoch 2.
    end = follower.log_end_offset
    for seq, original in zip(range(1, 6), offsets[1:], strict=True):
        retry = lead(follower, producer_batch(seq * 2, 2), epoch=2)
        assert retry.duplicate
        assert (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset)
    assert follower.log_end_offset == end  # nothing written twice
    with pytest.raises(OutOfOrderSequence):
        lead(follower, producer_batch(13, 1), epoch=2)  # a gap is still a gap
    assert not lead(follower, producer_batch(12, 1), epoch=2).duplicate
    assert epochs(follower) == [(1, 0), (2, end)]


def test_follower_builds_the_transaction_index_and_lso_as_the_leader(tmp_path):
    leader, follower = open_log(tmp_path / "a" / "t-0"), open_log(tmp_path / "b" / "t-0")
    lead(leader, producer_batch(0, 2, pid=1, transactional=True), epoch=0)
    lead(leader, producer_batch(0, 1, pid=2, transactional=True), epoch=0)
    lead(leader, make_batch(1), epoch=0)
    marker(leader, commit=False, epoch=0, pid=1)
    replicate(leader, follower)
    assert follower.last_stable_offset == leader.last_stable_offset == 2  # pid 2 is still open at 2
    marker(leader, commit=True, epoch=0, pid=2)
    replicate(leader, follower)
    assert follower.last_stable_offset == leader.last_stable_offset == follower.log_end_offset
    assert follower.collect_aborted_transactions(0, 100) == leader.collect_aborted_transactions(0, 100)
    assert [t.producer_id for t in follower.collect_aborted_transactions(0, 100)] == [1]


def test_the_lso_never_passes_the_high_watermark_and_reads_can_be_bounded_by_it(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(3):
        lead(log, make_batch(2), epoch=0)
    assert log.update_high_watermark(4) == 4
    assert (log.high_watermark, log.last_stable_offset) == (4, 4)
    lead(log, producer_batch(0, 1, transactional=True), epoch=0)
    assert log.last_stable_offset == 4  # the open transaction starts at 6, the HW is lower
    log.update_high_watermark(100)  # clamped to the log end
    assert (log.high_watermark, log.last_stable_offset) == (7, 6)
    log.update_high_watermark(2)
    assert records.read_header(log.read(0, 10**8, max_offset=log.high_watermark)).last_offset == 1
    assert len(fetched_batches(log.read(0, 10**8, max_offset=log.high_watermark))) == 1
    log.truncate_to(5)  # the batch [4, 5] goes: LEO 4
    assert log.log_end_offset == 4
    log.update_high_watermark(10)
    assert log.high_watermark == 4
    log.close()


def test_retention_never_deletes_a_segment_reaching_the_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_bytes=0))
    for _ in range(12):
        lead(log, make_batch(2), epoch=3)
    bases = log.segment_base_offsets()
    assert len(bases) >= 4
    log.update_high_watermark(bases[2])
    log.apply_retention()
    assert log.log_start_offset == bases[2]  # segments 0 and 1 end below the HW; 2 reaches past it
    assert epochs(log) == [(3, bases[2])]
    log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path / "t-0")
    lead(log, producer_batch(0, 3), epoch=1)
    log.update_high_watermark(3)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, epochs(log)) == (50, 50, 50, [])
    assert log.producer_state.last_entry(PID) is None
    follower_data = bytearray(producer_batch(3, 2))
    records.set_base_offset(follower_data, 0, 50)
    records.set_partition_leader_epoch(follower_data, 0, 4)
    assert append_as_follower(log, follower_data).first_offset == 50
    log.close()
    log = open_log(tmp_path / "t-0")
    assert (log.log_start_offset, log.log_end_offset, epochs(log)) == (50, 52, [(4, 50)])
    log.close()


def test_fetched_batches_drop_a_cut_off_tail_and_refuse_a_damaged_batch(tmp_path):
    a, b = make_batch(2), make_batch(3)
    data = bytes(a + b)
    assert len(fetched_batches(data[:-5])) == 1
    assert len(fetched_batches(data)) == 2
    damaged = bytearray(data)
    damaged[len(a) + 70] ^= 0xFF
    with pytest.raises(CorruptMessage):
        fetched_batches(damaged)


def test_follower_skips_batches_it_already_has(tmp_path):
    leader, follower = open_log(tmp_path / "a" / "t-0"), open_log(tmp_path / "b" / "t-0")
    for _ in range(3):
        lead(leader, make_batch(2), epoch=0)
    replicate(leader, follower)
    lead(leader, make_batch(2), epoch=0)
    assert append_as_follower(follower, leader.read(0, 10**8)).first_offset == 6
    assert follower.read(0, 10**8) == leader.read(0, 10**8)
    assert append_as_follower(follower, leader.read(0, 10**8)) is None


# --- truncation: the two divergence cases of KIP-101 and KIP-279 -------------------------------------


def diverge_to(log: Log, leader: Log) -> int:
    """Where ``log`` must truncate to follow ``leader``, found as a follower does: ask the leader for the
    end of the follower's latest epoch, and repeat with the follower's own epochs while the leader names
    one the follower never had (KIP-279)."""
    while True:
        epoch = log.leader_epochs.latest_epoch
        found = leader.end_offset_for_epoch(epoch)
        assert found is not None
        leader_epoch, leader_end = found
        mine = log.end_offset_for_epoch(leader_epoch)
        if mine is not None and mine[0] == leader_epoch:
            return min(leader_end, mine[1], log.log_end_offset)
        log.truncate_to(min(mine[1] if mine else leader_end, log.log_end_offset))


def test_kip101_case1_a_restarted_follower_keeps_what_the_leader_has_beyond_its_high_watermark(tmp_path):
    """Truncating to the high watermark on restart would drop offsets the leader acknowledged; the epoch
    answer keeps them, and the producer state still knows the batches there."""
    leader, follower = open_log(tmp_path / "a" / "t-0"), open_log(tmp_path / "b" / "t-0")
    for seq in range(4):
        lead(leader, producer_batch(seq, 1), epoch=1)
    replicate(leader, follower)
    follower.update_high_watermark(2)  # the follower had not heard the HW moved to 4 yet
    follower.close()
    follower = open_log(tmp_path / "b" / "t-0")
    assert diverge_to(follower, leader) == 4
    follower.truncate_to(4)
    assert follower.log_end_offset == 4
    assert lead(follower, producer_batch(3, 1), epoch=2).duplicate


def test_kip279_case2_divergent_tails_after_fast_leader_changes_truncate_and_rebuild_producer_state(tmp_path):
    """A (epoch 1) and B share offsets 0..2. A wrote 3..5 alone in epoch 1 and died; B led epoch 2 and
    wrote other batches at 3..4, then A came back as B's follower. A must drop 3..5 and rebuild its
    producer state from what is left (its snapshot at or below offset 3, then replay): the producer's
    batch at sequence 3 on A is gone, the one B wrote is what A must now answer as a duplicate."""
    a, b = open_log(tmp_path / "a" / "t-0"), open_log(tmp_path / "b" / "t-0")
    for seq in range(3):
        lead(a, producer_batch(seq, 1), epoch=1)
    replicate(a, b)
    a.roll()  # a producer snapshot at offset 3 on A (as a roll writes one)
    for seq in range(3, 6):
        lead(a, producer_batch(seq, 1), epoch=1)
    assert a.producer_state.last_entry(PID).last_seq == 5
    # B becomes leader of epoch 2 without A's tail; a producer with another id writes there, and PID's
    # retried sequence 3 lands at offset 3 (its first try only reached A).
    lead(b, producer_batch(0, 1, pid=99), epoch=2)
    lead(b, producer_batch(3, 1), epoch=2)
    offset = diverge_to(a, b)
    assert offset == 3
    a.truncate_to(offset)
    assert epochs(a) == [(1, 0)]
    assert a.producer_state.last_entry(PID).last_seq == 2  # rebuilt: sequences 3..5 are forgotten
    assert replicate(b, a).last_leader_epoch == 2
    assert a.read(0, 10**8) == b.read(0, 10**8)
    assert epochs(a) == epochs(b) == [(1, 0), (2, 3)]
    retry = lead(a, producer_batch(3, 1), epoch=3)
    assert retry.duplicate and retry.base_offset == 4
    with pytest.raises(OutOfOrderSequence):
        lead(a, producer_batch(5, 1), epoch=3)  # A's own lost batch is not in its state any more


def test_truncation_below_the_high_watermark_lowers_it_and_later_epochs_go(tmp_path):
    log = open_log(tmp_path / "t-0")
    lead(log, make_batch(2), epoch=1)
    lead(log, make_batch(2), epoch=3)
    lead(log, make_batch(2), epoch=4)
    log.update_high_watermark(6)
    log.truncate_to(2)
    assert (log.log_end_offset, log.high_watermark, epochs(log)) == (2, 2, [(1, 0)])
    assert (tmp_path / "t-0" / CHECKPOINT_FILE).read_text() == "0\n1\n1 0\n"
    log.close()


def test_truncation_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path):
    """A leader elected at offset 5 that lost the leadership before writing has (2, 5) in its cache; as a
    follower it must forget it, or every Fetch names epoch 2, which the new leader never saw."""
    log = open_log(tmp_path / "t-0")
    lead(log, make_batch(5), epoch=1)
    log.leader_epochs.assign(2, 5)  # what become_leader records
    log.truncate_to(5)
    assert epochs(log) == [(1, 0)]
    log.close()
