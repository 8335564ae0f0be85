"""Log: append, read, rolls, retention, timestamps, truncation."""

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.protocol import records
from onceflow.protocol.errors import MessageTooLarge, OffsetOutOfRange, RecordListTooLarge


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


def open_log(tmp_path, clock=None, **config):
    return Log.open(tmp_path / "topic-0", LogConfig(**config), clock_ms=clock or Clock())


def test_empty_log(tmp_path):
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.last_stable_offset) == (
        0,
        0,
        0,
        0,
    )
    assert log.read(0, 1000) == b""
    assert log.segment_paths() == [tmp_path / "topic-0" / "00000000000000000000.log"]
    log.close()


def test_append_read_round_trip(tmp_path):
    log = open_log(tmp_path)
    first = produce(log, make_batch(3, value=b"a"))
    second = produce(log, make_batch(2, value=b"b"), make_batch(1, value=b"c"))
    assert (first.base_offset, first.last_offset, first.log_append_time) == (0, 2, -1)
    assert (second.base_offset, second.last_offset) == (3, 5)
    assert log.log_end_offset == 6
    got = decode(log.read(0, 10**6))
    assert [(o, v) for o, v, _ in got] == [(0, b"a"), (1, b"a"), (2, b"a"), (3, b"b"), (4, b"b"), (5, b"c")]
    log.close()


def test_append_patches_producer_bytes_in_place(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(2))
    buf = make_batch(1)
    log.append(records.validate_produce_records(buf))
    assert records.read_header(buf).base_offset == 2
    log.close()


def test_read_returns_batch_holding_offset(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(5))
    produce(log, make_batch(5))
    data = log.read(7, 10**6)
    assert [h.base_offset for h, _ in records.scan_batches(data)[0]] == [5]
    log.close()


def test_read_max_bytes_whole_batches_and_min_one_batch(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=64)
    one = make_batch(1, value=b"x" * 100)
    for _ in range(20):
        produce(log, one)
    size = len(one)
    data = log.read(0, size * 3 + size // 2)
    assert len(data) == size * 3
    assert log.read(5, size - 1, min_one_batch=False) == b""
    big = log.read(5, 1, min_one_batch=True)
    assert len(big) == size and records.read_header(big).base_offset == 5
    log.close()


def test_read_stops_before_max_offset(tmp_path):
    log = open_log(tmp_path)
    for _ in range(10):
        produce(log, make_batch(2))
    data = log.read(0, 10**6, max_offset=6)
    assert [h.base_offset for h, _ in records.scan_batches(data)[0]] == [0, 2, 4]
    assert log.read(6, 10**6, max_offset=6) == b""
    # A max_offset inside a batch keeps that batch (its base offset is below it).
    data = log.read(0, 10**6, max_offset=5)
    assert records.scan_batches(data)[0][-1][0].base_offset == 4
    log.close()


def test_offset_out_of_range(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(3))
    assert log.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    log.close()


def test_message_too_large_and_record_list_too_large(tmp_path):
    log = open_log(tmp_path, max_message_bytes=200, segment_bytes=300)
    with pytest.raises(MessageTooLarge):
        produce(log, make_batch(1, value=b"x" * 300))
    small = make_batch(1, value=b"x" * 100)
    with pytest.raises(RecordListTooLarge):
        produce(log, small, small, small)
    assert log.log_end_offset == 0
    assert log.size_in_bytes == 0
    log.close()


def test_offsets_contiguous_across_rolls(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    expected = 0
    for i in range(60):
        result = produce(log, make_batch(1 + i % 4))
        assert result.base_offset == expected
        expected = result.last_offset + 1
    assert len(log.segment_base_offsets()) >= 5
    got = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 500)
        batch_records = decode(data)
        got.extend(o for o, _, _ in batch_records)
        offset = batch_records[-1][0] + 1
    assert got == list(range(expected))
    # every segment file stays under segment.bytes
    assert all(p.stat().st_size <= 1000 for p in log.segment_paths())
    log.close()


def test_segment_ms_roll_with_injected_clock(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=1000)
    produce(log, make_batch(1))
    clock.now += 500
    produce(log, make_batch(1))
    assert log.segment_base_offsets() == [0]
    clock.now += 600
    produce(log, make_batch(1))
    assert log.segment_base_offsets() == [0, 2]
    log.close()


def test_explicit_roll(tmp_path):
    log = open_log(tmp_path)
    log.roll()
    assert log.segment_base_offsets() == [0]  # empty active segment: nothing to roll
    produce(log, make_batch(2))
    log.roll()
    produce(log, make_batch(1))
    assert log.segment_base_offsets() == [0, 2]
    assert [o for o, _, _ in decode(log.read(0, 10**6))] == [0, 1]  # one segment per read
    assert [o for o, _, _ in decode(log.read(2, 10**6))] == [2]
    log.close()


def test_retention_by_time_advances_start_and_survives_reopen(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=10_000)
    for ts in (1_000, 2_000, 50_000):
        produce(log, make_batch(2, timestamp=ts))
        log.roll()
    produce(log, make_batch(1, timestamp=60_000))
    assert log.apply_retention(now_ms=20_000) == 2
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert decode(log.read(4, 10**6))[0][0] == 4
    log.close()
    reopened = open_log(tmp_path, clock, retention_ms=10_000)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 7)
    # never the active segment, however old
    assert reopened.apply_retention(now_ms=10**9) == 1
    assert reopened.segment_base_offsets() == [6]
    reopened.close()


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path, retention_bytes=1, retention_ms=-1)
    sizes = []
    for _ in range(4):
        produce(log, make_batch(1, value=b"x" * 50))
        sizes.append(log.size_in_bytes)
        log.roll()
    produce(log, make_batch(1))
    assert log.apply_retention() == 4
    assert log.log_start_offset == 4
    log.close()
    log = Log.open(tmp_path / "topic-0", LogConfig(retention_bytes=10**6))
    assert log.apply_retention() == 0
    assert log.log_start_offset == 4
    log.close()


def test_retention_bytes_keeps_what_fits(tmp_path):
    one = make_batch(1, value=b"x" * 100)
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=len(one) * 2)
    for _ in range(4):
        produce(log, one)
        log.roll()
    produce(log, one)  # 5 segments of one batch each
    assert log.apply_retention() == 3
    assert log.size_in_bytes == len(one) * 2
    log.close()


def test_log_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    result = produce(log, make_batch(3, timestamp=5), make_batch(1, timestamp=6))
    assert result.log_append_time == clock.now
    data = log.read(0, 10**6)
    batches, valid = records.scan_batches(data)  # CRCs still valid
    assert valid == len(data) and len(batches) == 2
    assert all(h.timestamp_type == 1 and h.max_timestamp == clock.now for h, _ in batches)
    assert [t for _, _, t in decode(data)] == [clock.now] * 4
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=50, segment_bytes=600)
    for i in range(30):
        produce(log, make_batch(3, timestamp=1_000 + i * 100, step_ms=10))  # record ts = 1000+100i+10j
    assert len(log.segment_base_offsets()) > 2
    assert log.offset_for_timestamp(0) == (0, 1_000)
    assert log.offset_for_timestamp(1_000) == (0, 1_000)
    assert log.offset_for_timestamp(1_001) == (1, 1_010)
    assert log.offset_for_timestamp(1_515) == (17, 1_520)
    assert log.offset_for_timestamp(1_521) == (18, 1_600)
    assert log.offset_for_timestamp(3_920) == (89, 3_920)
    assert log.offset_for_timestamp(3_921) is None
    log.close()
    log = open_log(tmp_path, index_interval_bytes=50, segment_bytes=600)
    assert log.offset_for_timestamp(2_345) == (42, 2_400)
    log.close()


def test_offset_for_timestamp_compressed_batch_level(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(3, timestamp=100, step_ms=10, compression=1))
    produce(log, make_batch(3, timestamp=200, step_ms=10, compression=1))
    assert log.offset_for_timestamp(150) == (3, 200)
    assert log.offset_for_timestamp(105)[0] == 0
    log.close()


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, segment_bytes=500)
    for _ in range(20):
        produce(log, make_batch(2))
    log.truncate_to(15)  # inside batch [14, 15]: the whole batch goes
    assert log.log_end_offset == 14
    assert decode(log.read(12, 10**6))[-1][0] == 13
    assert produce(log, make_batch(1)).base_offset == 14
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    log.close()
    log = open_log(tmp_path, segment_bytes=500)
    assert log.log_end_offset == 0
    log.close()


def test_replication_keeps_offsets(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    raw = make_batch(2, timestamp=77)
    records.set_base_offset(raw, 0, 10)
    result = log.append(records.validate_produce_records(raw), origin=AppendOrigin.REPLICATION)
    assert (result.base_offset, result.last_offset, result.log_append_time) == (10, 11, -1)
    assert log.log_end_offset == 12
    log.close()


def test_control_batch_append_and_iter_batches(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for _ in range(4):
        produce(log, make_batch(2))
    marker = bytearray(records.build_control_batch(9, 0, commit=True, coordinator_epoch=3, timestamp_ms=5))
    log.append([(records.read_header(marker), memoryview(marker))], origin=AppendOrigin.COORDINATOR)
    headers = [h for h, _ in log.iter_batches(3)]
    assert [h.base_offset for h in headers] == [2, 4, 6, 8]
    assert headers[-1].is_control
    _, view = list(log.iter_batches(8))[0]
    assert records.read_control_record(view) == (1, 3)
    log.close()


def test_delete(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(1))
    log.delete()
    assert not (tmp_path / "topic-0").exists()
