"""Disk reserved ahead of big appends: the file size never shows it, rolls and closes give it back."""

import os

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log import preallocate
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.log.segment import RESERVE_AHEAD, RESERVE_MIN_APPEND

BIG_VALUE = b"x" * (RESERVE_MIN_APPEND + 1000)  # one record makes an append big enough to reserve


def open_log(tmp_path, **config):
    return Log.open(tmp_path / "topic-0", LogConfig(**config))


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture
def reserving(tmp_path):
    """Skip where the filesystem under tmp_path cannot reserve (the appends then just don't)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        if not preallocate.reserve(fd, 0, 1 << 20):
            pytest.skip("fallocate(FALLOC_FL_KEEP_SIZE) unavailable on this filesystem")
    finally:
        os.close(fd)
        probe.unlink()


def test_big_append_reserves_past_the_end_without_growing_the_file(tmp_path, reserving):
    log = open_log(tmp_path)
    produce(log, make_batch(1, value=BIG_VALUE))
    path = log.segment_paths()[-1]
    size = os.path.getsize(path)
    assert size == log._segments[-1].size  # the file size is exactly the bytes written
    assert allocated(path) >= size + RESERVE_AHEAD
    assert [v for _, v, _ in decode(log.read(0, 10**7))] == [BIG_VALUE]
    log.close()


def test_small_appends_reserve_nothing(tmp_path, reserving):
    log = open_log(tmp_path)
    for _ in range(20):
        produce(log, make_batch(3))
    path = log.segment_paths()[-1]
    assert allocated(path) < os.path.getsize(path) + RESERVE_MIN_APPEND
    log.close()


def test_roll_and_close_give_the_reservation_back(tmp_path, reserving):
    log = open_log(tmp_path)
    produce(log, make_batch(1, value=BIG_VALUE))
    first = log.segment_paths()[-1]
    log.roll()
    assert allocated(first) < os.path.getsize(first) + RESERVE_MIN_APPEND
    produce(log, make_batch(1, value=BIG_VALUE))
    second = log.segment_paths()[-1]
    assert allocated(second) >= os.path.getsize(second) + RESERVE_AHEAD
    log.close()
    assert allocated(second) < os.path.getsize(second) + RESERVE_MIN_APPEND


def test_a_reservation_left_by_a_crash_is_reused_then_given_back(tmp_path, reserving):
    crashed = open_log(tmp_path)
    produce(crashed, make_batch(1, value=BIG_VALUE))
    path = crashed.segment_paths()[-1]
    # No close: as after kill -9, the reservation stays on disk past the end of the file.
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 1
    produce(reopened, make_batch(1, value=BIG_VALUE))
    assert [v for _, v, _ in decode(reopened.read(0, 10**7))] == [BIG_VALUE, BIG_VALUE]
    reopened.close()
    assert allocated(path) < os.path.getsize(path) + RESERVE_MIN_APPEND


def test_truncation_keeps_appending_correctly_after_a_reservation(tmp_path, reserving):
    log = open_log(tmp_path)
    produce(log, make_batch(1, value=BIG_VALUE))
    produce(log, make_batch(1, value=BIG_VALUE))
    log.truncate_to(1)
    produce(log, make_batch(1, value=b"after"))
    assert [(o, v) for o, v, _ in decode(log.read(0, 10**7))] == [(0, BIG_VALUE), (1, b"after")]
    log.close()
    reopened = open_log(tmp_path)
    assert [(o, v) for o, v, _ in decode(reopened.read(0, 10**7))] == [(0, BIG_VALUE), (1, b"after")]
    reopened.close()


def test_without_fallocate_appends_go_on_and_stop_asking(tmp_path, monkeypatch):
    calls = []

    def unsupported(fd, offset, length):
        calls.append(length)
        return None

    monkeypatch.setattr(preallocate, "reserve", unsupported)
    log = open_log(tmp_path)
    for _ in range(3):
        produce(log, make_batch(1, value=BIG_VALUE))
    assert len(calls) == 1
    assert [v for _, v, _ in decode(log.read(0, 10**7))] == [BIG_VALUE] * 3
    log.close()
