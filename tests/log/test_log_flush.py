"""What flush() and close() fsync: everything written since the last flush, and nothing else. A
partition that was opened after a clean shutdown and never written is closed with one fsync (the
directory, for the clean-shutdown marker): a broker stopping thousands of idle partitions took ~3 ms
each for five fsyncs."""

import os

import pytest
from tests.log.batches import make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import Log


@pytest.fixture
def fsyncs(monkeypatch):
    calls = []
    real = os.fsync

    def counting(fd):
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_an_untouched_log_closes_with_one_fsync(tmp_path, fsyncs):
    log = Log.open(tmp_path / "t-0", LogConfig())
    produce(log, make_batch(3))
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig())
    fsyncs.clear()
    reopened.flush()
    reopened.close()
    assert fsyncs == [str(tmp_path / "t-0")]


def test_what_was_written_is_fsynced_at_close(tmp_path, fsyncs):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig())
    produce(reopened, make_batch(3))
    fsyncs.clear()
    reopened.flush()
    assert str(tmp_path / "t-0" / "00000000000000000000.log") in fsyncs
    fsyncs.clear()
    reopened.flush()  # nothing new since
    assert fsyncs == []
    reopened.close()


def test_after_a_crash_the_recovered_segment_is_fsynced(tmp_path, fsyncs):
    log = Log.open(tmp_path / "t-0", LogConfig())
    produce(log, make_batch(3))
    log.abandon()  # kill -9: no flush, no marker
    recovered = Log.open(tmp_path / "t-0", LogConfig())
    fsyncs.clear()
    recovered.close()
    assert str(tmp_path / "t-0" / "00000000000000000000.log") in fsyncs


def test_flush_messages_fsyncs_once_that_many_records_were_appended(tmp_path, fsyncs):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=5))
    segment = str(tmp_path / "t-0" / "00000000000000000000.log")
    fsyncs.clear()
    produce(log, make_batch(3))
    assert segment not in fsyncs
    produce(log, make_batch(2))  # the 5th record: on disk before the append returns
    assert segment in fsyncs
    fsyncs.clear()
    produce(log, make_batch(4))
    assert fsyncs == []
    log.close()


def test_flush_ms_fsyncs_what_waited_that_long_at_the_next_check(tmp_path, fsyncs):
    now = [1_000_000]
    log = Log.open(tmp_path / "t-0", LogConfig(flush_ms=1000), clock_ms=lambda: now[0])
    fsyncs.clear()
    produce(log, make_batch(1))
    assert not log.flush_if_due()
    now[0] += 999
    assert not log.flush_if_due()
    now[0] += 1
    assert log.flush_if_due()  # what the broker's periodic check (log.flush.scheduler.interval.ms) does
    assert str(tmp_path / "t-0" / "00000000000000000000.log") in fsyncs
    now[0] += 5000
    assert not log.flush_if_due()  # nothing new since
    log.close()


def test_a_flush_without_indexes_fsyncs_the_records_alone(tmp_path, fsyncs):
    index = tmp_path / "t-0" / "00000000000000000000.index"
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    log.flush()
    saved = index.read_bytes()
    produce(log, make_batch(3))
    fsyncs.clear()
    log.flush(indexes=False)  # the Raft metadata log's flush after each write
    assert fsyncs == [str(tmp_path / "t-0" / "00000000000000000000.log")]
    assert index.read_bytes() == saved
    log.close()
    assert index.read_bytes() != saved


def test_close_writes_the_indexes_a_flush_without_them_left_behind(tmp_path, caplog):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(index_interval_bytes=1))
    produce(log, make_batch(3))
    log.flush()
    produce(log, make_batch(2))
    log.flush(indexes=False)
    log.close()  # nothing unflushed, but the saved indexes end at the first batch
    with caplog.at_level("INFO", logger="onceflow.log.segment"):
        reopened = Log.open(directory, LogConfig(index_interval_bytes=1))
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]  # trusted as saved
    assert reopened.log_end_offset == 5
    reopened.close()
