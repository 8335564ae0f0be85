"""Producer state wired into Log: duplicates, sequence/epoch errors, snapshots, restarts, truncation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.log.producer_snapshot import list_snapshots, snapshot_path
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidProducerEpoch, OutOfOrderSequence
from onceflow.protocol.record_codec import encode_batch

PID = 42
CONFIG = LogConfig(segment_bytes=1_000, index_interval_bytes=100)


# ts None = now: producers with old timestamps would expire (producer.id.expiration.ms) on reopen
def producer_batch(
    first_seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, ts: int | None = None
) -> bytearray:
    values = [(None, b"p%d-e%d-s%d" % (pid, epoch, first_seq + i)) for i in range(count)]
    return bytearray(
        encode_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=first_seq, timestamp_ms=ts)
    )


def send(log: Log, first_seq: int, count: int = 1, **kwargs):
    return log.append(records.validate_produce_records(producer_batch(first_seq, count, **kwargs)))


def stored_values(log: Log) -> list[bytes]:
    return [
        value for _, value, _ in decode(b"".join(view for _, view in log.iter_batches(log.log_start_offset)))
    ]


def fill(log: Log, batches: int, count: int = 2) -> list[tuple[int, int]]:
    """``batches`` in-order batches of ``count`` records from PID; returns each one's offsets."""
    offsets = []
    for i in range(batches):
        result = send(log, i * count, count)
        assert not result.duplicate
        offsets.append((result.base_offset, result.last_offset))
    return offsets


def test_duplicate_is_answered_with_original_offsets_and_not_written(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    offsets = fill(log, 6)
    end = log.log_end_offset
    for i in range(1, 6):  # the five newest batches are cached
        result = send(log, i * 2, 2)
        assert result.duplicate
        assert (result.base_offset, result.last_offset) == offsets[i]
    assert log.log_end_offset == end
    assert len(stored_values(log)) == 12
    log.close()


def test_sequence_and_epoch_errors_write_nothing(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    fill(log, 6)
    end = log.log_end_offset
    with pytest.raises(OutOfOrderSequence):
        send(log, 0, 2)  # the 6th newest batch: outside the window
    with pytest.raises(OutOfOrderSequence):
        send(log, 14, 1)  # gap: 12 expected
    with pytest.raises(OutOfOrderSequence):
        send(log, 11, 2)  # partial overlap
    with pytest.raises(OutOfOrderSequence):
        send(log, 5, 1, epoch=1)  # a new epoch must start at 0
    assert log.log_end_offset == end
    assert send(log, 0, 1, epoch=1).base_offset == end
    with pytest.raises(InvalidProducerEpoch):
        send(log, 12, 1, epoch=0)
    assert log.log_end_offset == end + 1
    log.close()


def test_non_idempotent_batches_are_never_duplicates(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    first = produce(log, make_batch(2))
    second = produce(log, make_batch(2))
    assert not second.duplicate
    assert second.base_offset == first.last_offset + 1
    log.close()


def test_clean_restart_remembers_every_cached_batch(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig())
    offsets = fill(log, 6)
    log.close()
    assert snapshot_path(directory, 12).exists()  # taken at close, at the log end
    log = Log.open(directory, LogConfig())
    for i in range(1, 6):
        result = send(log, i * 2, 2)
        assert result.duplicate and (result.base_offset, result.last_offset) == offsets[i]
    with pytest.raises(OutOfOrderSequence):
        send(log, 0, 2)
    assert send(log, 12, 1).base_offset == 12
    log.close()


def test_unclean_restart_replays_after_the_roll_snapshot(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    offsets = fill(log, 30)
    assert len(log.segment_base_offsets()) > 2
    # Every roll left a snapshot at the new segment's base offset.
    assert {s.offset for s in list_snapshots(directory)} >= set(log.segment_base_offsets()[1:])
    log.abandon()  # what kill -9 leaves: no close snapshot, no clean-shutdown marker
    log = Log.open(directory, CONFIG)
    for i in range(25, 30):
        result = send(log, i * 2, 2)
        assert result.duplicate and (result.base_offset, result.last_offset) == offsets[i]
    assert len(stored_values(log)) == 60
    log.close()


def test_corrupt_newest_snapshot_falls_back_and_still_catches_duplicates(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    offsets = fill(log, 30)
    log.close()
    newest = list_snapshots(directory)[-1].path
    newest.write_bytes(newest.read_bytes()[:-3])  # truncated
    log = Log.open(directory, CONFIG)
    assert not newest.exists()
    for i in range(25, 30):
        result = send(log, i * 2, 2)
        assert result.duplicate and (result.base_offset, result.last_offset) == offsets[i]
    log.close()


def test_kill9_of_a_writing_process_does_not_forget_duplicates(tmp_path):
    directory = tmp_path / "t-0"
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.log.test_log_producer_state import CONFIG, fill
        from onceflow.log.log import Log
        log = Log.open({str(directory)!r}, CONFIG)
        fill(log, 20)
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert process.stdout.readline().strip() == b"ready"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = Log.open(directory, CONFIG)
    assert log.log_end_offset == 40
    result = send(log, 38, 2)
    assert result.duplicate and result.base_offset == 38
    with pytest.raises(OutOfOrderSequence):
        send(log, 41, 1)
    log.close()


def test_truncation_forgets_the_removed_batches(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    offsets = fill(log, 30)
    base, _ = offsets[27]
    log.truncate_to(base)  # batches 27..29 are gone
    assert all(s.offset <= base for s in list_snapshots(directory))
    with pytest.raises(OutOfOrderSequence):
        send(log, 58, 2)  # the producer's last stored batch is now 26 (sequences 52, 53)
    assert send(log, 52, 2).duplicate
    result = send(log, 54, 2)
    assert not result.duplicate and result.base_offset == base
    log.close()
    log = Log.open(directory, CONFIG)
    assert send(log, 54, 2).duplicate
    log.close()


def test_retention_deletes_old_snapshots_but_keeps_producers(tmp_path):
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=100, retention_bytes=1_000, retention_ms=-1)
    log = Log.open(directory, config)
    fill(log, 60)
    before = len(list_snapshots(directory))
    assert log.apply_retention() > 0
    snapshots = list_snapshots(directory)
    assert len(snapshots) < before
    assert all(s.offset >= log.log_start_offset for s in snapshots[:-2])
    assert send(log, 118, 2).duplicate  # the producer's newest batches are still known
    log.close()


def test_expired_producer_may_restart_at_any_sequence(tmp_path):
    now = [1_000_000]
    log = Log.open(tmp_path / "t-0", CONFIG, clock_ms=lambda: now[0], producer_id_expiration_ms=60_000)
    send(log, 0, 2, ts=now[0])
    assert log.remove_expired_producers(now[0] + 59_999) == []
    with pytest.raises(OutOfOrderSequence):
        send(log, 7, 1, ts=now[0])
    assert log.remove_expired_producers(now[0] + 60_000) == [PID]
    assert log.producer_state.active_producers() == []
    assert not send(log, 7, 1, ts=now[0]).duplicate
    log.close()


def test_periodic_snapshots_bound_the_replay_after_a_crash_inside_one_big_segment(tmp_path):
    big_segments = LogConfig(segment_bytes=1 << 30, index_interval_bytes=100)
    log = Log.open(tmp_path / "t-0", big_segments)
    log.producer_snapshot_interval_bytes = 500  # a few batches
    offsets = fill(log, 40)
    assert log.segment_base_offsets() == [0]
    inside = [s.offset for s in list_snapshots(log.directory)]
    # only the newest two periodic snapshots are kept, all inside the one segment
    assert len(inside) == 2 and 0 < inside[0] < inside[1] <= log.log_end_offset
    newest = inside[-1]
    log.abandon()  # a crash: no snapshot at the log end, no clean-shutdown marker
    reopened = Log.open(tmp_path / "t-0", big_segments)
    assert reopened.producer_state.map_end_offset == reopened.log_end_offset
    # every cached batch is still a duplicate, including those written after the newest snapshot
    for i in range(35, 40):
        result = send(reopened, i * 2, 2)
        assert result.duplicate and (result.base_offset, result.last_offset) == offsets[i]
    assert newest < offsets[-1][1]  # the tail after the snapshot really was replayed
    reopened.close()
