"""An append that fails part-way through its write (a full disk) leaves nothing behind: the next append
lands where the indexes expect it, and a restart keeps every acknowledged batch.

The failure is real (``tests.helpers.disk.file_size_limit``): the kernel writes part of the batch."""

import pytest
from tests.helpers.disk import file_size_limit
from tests.log.batches import decode, make_batch, produce

from onceflow.log.config import LogConfig
from onceflow.log.log import Log


def values(log: Log) -> list[tuple[int, bytes]]:
    return [(offset, value) for offset, value, _ in decode(log.read(0, 10**7))]


def open_log(tmp_path) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(), clock_ms=lambda: 1_000_000)


def test_torn_append_is_cut_off_and_later_appends_survive_a_restart(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(2, value=b"a" * 100))
    segment = log.segment_paths()[-1]
    size = segment.stat().st_size

    with file_size_limit(size + 300), pytest.raises(OSError):
        produce(log, make_batch(4, value=b"b" * 500))  # ~2 KB: its first 300 bytes are written

    assert segment.stat().st_size == size  # the torn part is gone
    assert log.log_end_offset == 2
    acknowledged = produce(log, make_batch(2, value=b"c"))
    assert acknowledged.base_offset == 2
    expected = [(0, b"a" * 100), (1, b"a" * 100), (2, b"c"), (3, b"c")]
    assert values(log) == expected
    log.close()

    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 4
    assert values(reopened) == expected
    reopened.close()


def test_torn_append_after_an_unclean_stop_keeps_acknowledged_batches(tmp_path):
    """No clean close: recovery scans the data, and must not stop at a torn batch ahead of acked ones."""
    log = open_log(tmp_path)
    produce(log, make_batch(1, value=b"a"))
    size = log.segment_paths()[-1].stat().st_size
    with file_size_limit(size + 100), pytest.raises(OSError):
        produce(log, make_batch(3, value=b"b" * 400))
    produce(log, make_batch(1, value=b"c"))
    log.flush()
    # Dropped without close(): the next open recovers as after a crash.
    (tmp_path / "topic-0" / ".clean_shutdown").unlink(missing_ok=True)

    reopened = open_log(tmp_path)
    assert values(reopened) == [(0, b"a"), (1, b"c")]
    reopened.close()
