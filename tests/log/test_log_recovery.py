"""Log recovery: torn tails, lost or corrupt indexes, unclean shutdown, a real kill -9."""

import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import CLEAN_SHUTDOWN_FILE, Log

CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=100)


def fill(directory, batches=40, config=CONFIG):
    log = Log.open(directory, config)
    for i in range(batches):
        produce(log, make_batch(1 + i % 3, value=b"v%d" % i))
    return log


def all_offsets(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        got = decode(log.read(offset, 10**6))
        out.extend(o for o, _, _ in got)
        offset = got[-1][0] + 1
    return out


def test_clean_close_leaves_marker_and_reopen_consumes_it(tmp_path):
    directory = tmp_path / "t-0"
    log = fill(directory)
    end = log.log_end_offset
    log.close()
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    log = Log.open(directory, CONFIG)
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()
    assert log.log_end_offset == end
    assert all_offsets(log) == list(range(end))
    log.close()


def test_unclean_reopen_without_close(tmp_path):
    directory = tmp_path / "t-0"
    log = fill(directory)
    end = log.log_end_offset
    # no close(): the process "died"; the bytes are in the page cache, the active index is not on disk
    log2 = Log.open(directory, CONFIG)
    assert log2.log_end_offset == end
    assert all_offsets(log2) == list(range(end))
    assert produce(log2, make_batch(1)).base_offset == end
    log2.close()


@pytest.mark.parametrize("tail", [b"\x00" * 7, b"garbage!" * 20, "half"])
def test_torn_tail_is_truncated(tmp_path, tail):
    directory = tmp_path / "t-0"
    log = fill(directory)
    end = log.log_end_offset
    active = log.segment_paths()[-1]
    size_before = active.stat().st_size
    if tail == "half":
        tail = bytes(make_batch(5, value=b"x" * 40))[:70]
    with open(active, "ab") as f:
        f.write(tail)
    log2 = Log.open(directory, CONFIG)
    assert log2.log_end_offset == end
    assert active.stat().st_size == size_before
    assert produce(log2, make_batch(2)).base_offset == end
    assert all_offsets(log2) == list(range(end + 2))
    log2.close()


def test_corrupt_batch_in_active_segment_truncates_from_there(tmp_path):
    directory = tmp_path / "t-0"
    log = fill(directory, batches=5, config=LogConfig())
    sizes = [len(make_batch(1 + i % 3, value=b"v%d" % i)) for i in range(5)]
    path = log.segment_paths()[-1]
    data = bytearray(path.read_bytes())
    data[sum(sizes[:3]) + 65] ^= 0xFF  # a record byte of the 4th batch: its CRC no longer matches
    path.write_bytes(data)
    log2 = Log.open(directory, LogConfig())
    assert log2.log_end_offset == 1 + 2 + 3  # the first three batches survive
    assert path.stat().st_size == sum(sizes[:3])
    log2.close()


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage", "stale"])
def test_indexes_rebuilt(tmp_path, damage):
    directory = tmp_path / "t-0"
    log = fill(directory)
    end = log.log_end_offset
    expected_ts = log.offset_for_timestamp(1_001)
    log.close()
    for index in list(directory.glob("*.index")) + list(directory.glob("*.timeindex")):
        if damage == "delete":
            index.unlink()
        elif damage == "truncate":
            index.write_bytes(index.read_bytes()[:-3])
        elif damage == "garbage":
            index.write_bytes(os.urandom(24))
        else:  # an index from an older, shorter state of the segment
            index.write_bytes(index.read_bytes()[:-24] if len(index.read_bytes()) >= 48 else b"")
    log = Log.open(directory, CONFIG)
    assert log.log_end_offset == end
    assert all_offsets(log) == list(range(end))
    assert log.offset_for_timestamp(1_001) == expected_ts
    for index in directory.glob("*.index"):
        assert index.stat().st_size % 8 == 0 and index.stat().st_size > 0
    log.close()


def test_leftover_files_removed(tmp_path):
    directory = tmp_path / "t-0"
    log = fill(directory, batches=3)
    log.close()
    (directory / "00000000000000099999.index").write_bytes(b"\x00" * 8)
    (directory / "00000000000000000000.index.tmp").write_bytes(b"junk")
    log = Log.open(directory, CONFIG)
    assert not (directory / "00000000000000099999.index").exists()
    assert not (directory / "00000000000000000000.index.tmp").exists()
    log.close()


def test_recovery_after_kill_9(tmp_path):
    """A child process appends, reports, and is killed mid-stream; every reported append survives."""
    directory = tmp_path / "t-0"
    script = textwrap.dedent(
        f"""
        import sys
        from onceflow.log.config import LogConfig
        from onceflow.log.log import Log
        from tests.log.batches import make_batch, produce
        log = Log.open({str(directory)!r}, LogConfig(segment_bytes=5_000, index_interval_bytes=200))
        i = 0
        while True:
            result = produce(log, make_batch(3, value=b"r%d" % i))
            print(result.last_offset, flush=True)
            i += 1
        """
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        acknowledged = -1
        for line in proc.stdout:
            acknowledged = int(line)
            if acknowledged >= 600:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert acknowledged >= 600
    log = Log.open(directory, LogConfig(segment_bytes=5_000, index_interval_bytes=200))
    assert log.log_end_offset > acknowledged
    assert all_offsets(log) == list(range(log.log_end_offset))
    log.close()


def test_bit_rot_in_sealed_segment_is_a_storage_error_not_a_hang(tmp_path):
    from onceflow.protocol.errors import KafkaStorageError

    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(index_interval_bytes=10**6))
    for _ in range(5):
        produce(log, make_batch(1))
    log.roll()
    produce(log, make_batch(1))
    log.close()
    first = directory / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    size = len(make_batch(1))
    data[size + 8 : size + 12] = (-100).to_bytes(4, "big", signed=True)  # 2nd batch's batchLength
    first.write_bytes(data)
    log = Log.open(directory, LogConfig(index_interval_bytes=10**6))  # the index still checks out
    with pytest.raises(KafkaStorageError):
        log.read(3, 10**6)
    log.close()


def test_only_a_log_left_without_its_marker_counts_as_unclean(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="onceflow.log")
    made_first = tmp_path / "made-first"
    made_first.mkdir()  # as the metadata log's directory is, before its log opens
    for directory in (tmp_path / "new", made_first):
        log = Log.open(directory, CONFIG)
        assert not log.recovered_unclean
        log.close()
    assert "unclean" not in caplog.text
    fill(tmp_path / "t-0")  # never closed: the process "died"
    recovered = Log.open(tmp_path / "t-0", CONFIG)
    assert recovered.recovered_unclean
    assert "unclean shutdown" in caplog.text
    recovered.close()
    assert not Log.open(tmp_path / "t-0", CONFIG).recovered_unclean


def test_opening_a_log_logs_nothing_at_info(tmp_path, caplog):
    fill(tmp_path / "t-0").close()
    caplog.set_level(logging.INFO)
    Log.open(tmp_path / "t-0", CONFIG).close()
    assert [r.getMessage() for r in caplog.records] == []
