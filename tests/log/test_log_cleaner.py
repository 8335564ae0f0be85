"""Log compaction (``onceflow.log.cleaner``) on a real ``Log`` in a temporary directory."""

import os

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from onceflow.log import cleaner
from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidProducerEpoch, InvalidRecord, OutOfOrderSequence

DAY_MS = 86_400_000


class Clock:
    def __init__(self, now: int = 10 * DAY_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def keyed(pairs, *, pid=-1, epoch=-1, seq=-1, txn=False, timestamp=None, compression=0) -> bytearray:
    """One batch of ``(key, value)`` records (aiokafka's encoder, independent of onceflow.protocol)."""
    builder = DefaultRecordBatchBuilder(2, compression, int(txn), pid, epoch, seq, 10**8)
    for i, (key, value) in enumerate(pairs):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    return bytearray(builder.build())


def append(log, raw, origin=AppendOrigin.CLIENT):
    return log.append(records.validate_produce_records(raw), origin=origin)


def end_txn(log, pid, epoch, *, commit, timestamp):
    header, buf = records.control_batch_for_append(
        pid, epoch, commit=commit, coordinator_epoch=0, timestamp_ms=timestamp
    )
    log.append([(header, memoryview(buf))], origin=AppendOrigin.COORDINATOR)


def contents(log, start=None):
    """``(offset, key, value)`` of every record from ``start`` (default: the log start), read the way a
    consumer does: fetch, then go on after the last batch's last offset."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            size = records.batch_size_at(view, pos)
            raw = bytes(view[pos : pos + size])
            header = records.read_header(raw)
            batch = DefaultRecordBatch(raw)
            assert batch.validate_crc()
            if not header.is_control:
                out.extend((r.offset, r.key, r.value) for r in batch if r.offset >= offset)
            offset = max(offset, header.last_offset + 1)
            pos += size
    return out


def open_log(path, clock, **config):
    settings = {"cleanup_policy": "compact", "delete_retention_ms": DAY_MS, "min_cleanable_dirty_ratio": 0.0}
    settings.update(config)
    return Log.open(path, LogConfig(**settings), clock_ms=clock)


@pytest.fixture
def clock():
    return Clock()


def test_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"a", b"1"), (b"b", b"1")]))  # 0, 1
    append(log, keyed([(b"a", b"2")]))  # 2
    log.roll()
    append(log, keyed([(b"c", b"1"), (b"a", b"3")]))  # 3, 4
    log.roll()
    append(log, keyed([(b"a", b"4")]))  # 5: the active segment is never cleaned
    result = cleaner.clean(log, clock.now)
    assert result is not None and result.records_removed == 2
    assert contents(log) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"a", b"3"), (5, b"a", b"4")]
    assert log.segment_base_offsets() == [0, 5]  # the two sealed segments became one
    assert (log.log_start_offset, log.log_end_offset) == (0, 6)
    # Fetches at offsets that are gone return the next batch, as Kafka's do.
    assert contents(log, start=2)[0] == (3, b"c", b"1")
    assert cleaner.read_checkpoint(log.directory) == 5
    assert cleaner.clean(log, clock.now) is None  # nothing dirty since


def test_a_restart_reads_the_cleaned_log_back(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    for i in range(3):
        append(log, keyed([(b"k", b"%d" % i), (b"other%d" % i, b"x")]))
        log.roll()
    cleaner.clean(log, clock.now)
    before = contents(log)
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert (
        contents(reopened)
        == before
        == [(1, b"other0", b"x"), (3, b"other1", b"x"), (4, b"k", b"2"), (5, b"other2", b"x")]
    )
    reopened.abandon()
    crashed = open_log(tmp_path / "t-0", clock)  # an unclean open scans the active segment only
    assert contents(crashed) == before


def test_records_without_a_key_are_removed(tmp_path, clock):
    # Written before the topic was changed to cleanup.policy=compact (which refuses them from then on).
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="delete")
    append(log, keyed([(None, b"no key"), (b"k", b"v")]))
    log.roll()
    log.reconfigure(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0))
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"k", b"v")]


def test_tombstones_outlive_their_key_by_delete_retention_ms(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"k", b"v"), (b"keep", b"v")], timestamp=clock.now))
    append(log, keyed([(b"k", None)], timestamp=clock.now))  # the delete
    log.roll()
    cleaner.clean(log, clock.now)
    # The value is gone at once; the tombstone stays so that a consumer reading now still sees the delete.
    assert contents(log) == [(1, b"keep", b"v"), (2, b"k", None)]
    append(log, keyed([(b"later", b"v")], timestamp=clock.now))
    log.roll()
    clock.now += DAY_MS + 1
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"keep", b"v"), (3, b"later", b"v")]


def test_a_tombstone_with_an_old_timestamp_stays_delete_retention_ms_after_compaction_finds_it(
    tmp_path, clock
):
    # KIP-534. A replay of old events (or a producer whose clock is behind) writes a delete whose
    # timestamp is already older than delete.retention.ms: it must still be readable for that long.
    log = open_log(tmp_path / "t-0", clock)
    old = clock.now - 30 * DAY_MS
    append(log, keyed([(b"k", b"v"), (b"keep", b"v")], timestamp=old))  # 0, 1
    append(log, keyed([(b"k", None), (b"n", b"1")], timestamp=old + 5))  # 2: the delete, 3
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"keep", b"v"), (2, b"k", None), (3, b"n", b"1")]
    raw = log.read(2, 1 << 20)
    header = records.read_header(raw)
    assert (header.base_offset, header.delete_horizon_ms) == (2, clock.now + DAY_MS)
    # The records keep their own timestamps (deltas from the horizon); max timestamp is unchanged.
    assert [r.timestamp for r in DefaultRecordBatch(bytes(raw[: header.size]))] == [old + 5, old + 5]
    assert header.max_timestamp == old + 5
    # A cleaning before the horizon keeps it, and keeps the horizon it set.
    clock.now += DAY_MS - 1
    append(log, keyed([(b"n", b"2")]))  # 4
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"keep", b"v"), (2, b"k", None), (4, b"n", b"2")]
    assert records.read_header(log.read(2, 1 << 20)).delete_horizon_ms == clock.now + 1
    # The first cleaning at or past it removes the tombstone.
    clock.now += 1
    append(log, keyed([(b"n", b"3")]))  # 5
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"keep", b"v"), (5, b"n", b"3")]


def test_batches_without_tombstones_get_no_delete_horizon(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"a", b"1"), (b"b", b"1")], timestamp=clock.now - 5))  # 0, 1
    append(log, keyed([(b"a", b"2")], timestamp=clock.now))  # 2
    log.roll()
    cleaner.clean(log, clock.now)
    raw = log.read(0, 1 << 20)
    header = records.read_header(raw)
    # The rebuilt batch's base timestamp is its first record's again, as a producer would write it.
    assert (header.base_offset, header.delete_horizon_ms, header.base_timestamp) == (0, None, clock.now - 5)
    assert [r.timestamp for r in DefaultRecordBatch(bytes(raw[: header.size]))] == [clock.now - 5]


def test_compressed_batches_keep_their_codec(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], compression=1))  # gzip
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(1, b"b", b"1"), (2, b"a", b"2")]
    header = records.read_header(log.read(0, 1 << 20))
    assert header.compression == 1 and (header.base_offset, header.last_offset) == (0, 2)


def test_aborted_records_go_and_never_shadow_the_committed_value(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"k", b"committed")]))  # 0
    append(log, keyed([(b"k", b"aborted")], pid=7, epoch=0, seq=0, txn=True))  # 1
    end_txn(log, 7, 0, commit=False, timestamp=clock.now)  # 2: its marker
    log.roll()
    cleaner.clean(log, clock.now)
    # The marker is younger than delete.retention.ms: it stays, with its aborted-index entry.
    assert contents(log) == [(0, b"k", b"committed")]
    assert [
        (t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_transactions(0, 3)
    ] == [(7, 1, 2)]
    # The producer's last batch stays as an empty batch (its sequence is still the one to follow).
    assert records.read_header(log.read(1, 1 << 20)).record_count == 0
    clock.now += DAY_MS + 1
    append(log, keyed([(b"other", b"v")]))
    log.roll()
    cleaner.clean(log, clock.now)
    # The transaction still has a (now empty) batch, so its marker is still needed.
    assert log.collect_aborted_transactions(0, 4) != []
    assert contents(log) == [(0, b"k", b"committed"), (3, b"other", b"v")]


def test_markers_go_once_their_transaction_has_nothing_left(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    old = clock.now - 2 * DAY_MS
    append(log, keyed([(b"k", b"1")], pid=7, epoch=0, seq=0, txn=True, timestamp=old))  # 0
    end_txn(log, 7, 0, commit=True, timestamp=old)  # 1
    append(log, keyed([(b"k", b"2")], pid=7, epoch=0, seq=1, txn=True, timestamp=old))  # 2
    end_txn(log, 7, 0, commit=True, timestamp=old)  # 3
    log.roll()
    cleaner.clean(log, clock.now)
    batches = [records.read_header(raw) for raw in _batches(log.read(0, 1 << 20))]
    # Offset 0 was replaced by offset 2. Its marker is no longer needed, but however old its timestamp,
    # it stays delete.retention.ms from now (its delete horizon), so that a read_committed consumer
    # reading now still sees the transaction end.
    assert [(h.base_offset, h.is_control, h.delete_horizon_ms) for h in batches] == [
        (1, True, clock.now + DAY_MS),
        (2, False, None),
        (3, True, None),
    ]
    clock.now += DAY_MS
    append(log, keyed([(b"other", b"v")]))  # 4
    log.roll()
    cleaner.clean(log, clock.now)
    batches = [records.read_header(raw) for raw in _batches(log.read(0, 1 << 20))]
    # Past its horizon, the marker went. The second transaction (the producer's last batch) and its
    # marker stay.
    assert [(h.base_offset, h.is_control) for h in batches] == [(2, False), (3, True), (4, False)]
    assert contents(log) == [(2, b"k", b"2"), (4, b"other", b"v")]


def test_an_open_transaction_holds_cleaning_below_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"k", b"1")]))  # 0
    log.roll()
    append(log, keyed([(b"k", b"2")], pid=7, epoch=0, seq=0, txn=True))  # 1: open
    log.roll()
    append(log, keyed([(b"k", b"3")]))  # 2
    log.roll()
    assert log.last_stable_offset == 1
    result = cleaner.clean(log, clock.now)
    assert result is not None and [g.sources[0].base_offset for g in result.groups] == [0]
    assert [r[0] for r in contents(log)] == [0, 1, 2]  # offset 0 is the latest below the LSO
    end_txn(log, 7, 0, commit=True, timestamp=clock.now)
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(2, b"k", b"3")]


def test_a_producers_last_batch_keeps_its_sequence_without_a_snapshot(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"k", b"1"), (b"k", b"2")], pid=5, epoch=0, seq=0))  # 0-1, sequences 0-1
    append(log, keyed([(b"j", b"1")]))  # 2
    append(log, keyed([(b"k", b"3"), (b"j", b"2")]))  # 3-4: replaces everything above
    log.roll()
    cleaner.clean(log, clock.now)
    assert contents(log) == [(3, b"k", b"3"), (4, b"j", b"2")]
    log.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()  # recovery must rebuild the producer state from the log alone
    reopened = open_log(tmp_path / "t-0", clock)
    with pytest.raises(OutOfOrderSequence):
        append(reopened, keyed([(b"k", b"x")], pid=5, epoch=0, seq=5))
    duplicate = append(reopened, keyed([(b"k", b"1"), (b"k", b"2")], pid=5, epoch=0, seq=0))
    assert duplicate.duplicate and (duplicate.base_offset, duplicate.last_offset) == (0, 1)
    assert append(reopened, keyed([(b"k", b"4")], pid=5, epoch=0, seq=2)).base_offset == 5


def test_a_crash_after_the_commit_point_is_finished_on_open(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    for i in range(3):
        append(log, keyed([(b"k", b"%d" % i)]))
        log.roll()
    cleaning = cleaner.plan(log, clock.now)
    result = cleaner.build(cleaning)
    [group] = result.groups
    # The swap list is written (the commit point), then the process dies before any file moves.
    (tmp_path / "t-0" / "00000000000000000000.swap").write_text("0 1 2\n")
    log.abandon()
    reopened = open_log(tmp_path / "t-0", clock)
    assert contents(reopened) == [(2, b"k", b"2")]
    assert reopened.segment_base_offsets() == [0, 3]
    assert not list((tmp_path / "t-0").glob("*.swap")) and not group.path.exists()


def test_a_crash_before_the_commit_point_keeps_the_old_segments(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    for i in range(3):
        append(log, keyed([(b"k", b"%d" % i)]))
        log.roll()
    cleaner.build(cleaner.plan(log, clock.now))  # the cleaned file is written, never installed
    log.abandon()
    reopened = open_log(tmp_path / "t-0", clock)
    assert contents(reopened) == [(0, b"k", b"0"), (1, b"k", b"1"), (2, b"k", b"2")]
    assert not [p for p in os.listdir(tmp_path / "t-0") if p.endswith(".cleaned")]


def test_install_refuses_segments_that_changed_under_the_build(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, cleanup_policy="compact,delete", retention_ms=DAY_MS)
    append(log, keyed([(b"k", b"0")], timestamp=clock.now - 3 * DAY_MS))
    log.roll()
    append(log, keyed([(b"k", b"1")], timestamp=clock.now))
    log.roll()
    cleaning = cleaner.plan(log, clock.now)
    result = cleaner.build(cleaning)
    assert log.apply_retention(clock.now) == 1  # segment 0 goes while the cleaned file waits
    assert cleaner.install(log, cleaning, result) == 0
    assert contents(log) == [(1, b"k", b"1")]
    assert not [p for p in os.listdir(tmp_path / "t-0") if p.endswith(".cleaned")]


def test_retention_deletes_only_under_the_delete_policy(tmp_path, clock):
    compacted = open_log(tmp_path / "c-0", clock, retention_ms=DAY_MS)
    both = open_log(tmp_path / "b-0", clock, cleanup_policy="compact,delete", retention_ms=DAY_MS)
    for log in (compacted, both):
        append(log, keyed([(b"k", b"v")], timestamp=clock.now - 3 * DAY_MS))
        log.roll()
        append(log, keyed([(b"j", b"v")], timestamp=clock.now))
    assert compacted.apply_retention(clock.now) == 0
    assert both.apply_retention(clock.now) == 1


def test_the_dirty_ratio_decides_when_to_clean(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, min_cleanable_dirty_ratio=0.5)
    append(log, keyed([(b"k%d" % i, b"v" * 100) for i in range(20)]))
    log.roll()
    assert cleaner.clean(log, clock.now) is not None  # all dirty
    append(log, keyed([(b"k0", b"v")]))
    log.roll()
    assert cleaner.clean(log, clock.now) is None  # a small dirty tail below half
    for _ in range(3):
        append(log, keyed([(b"k%d" % i, b"w" * 100) for i in range(20)]))
        log.roll()
    assert cleaner.clean(log, clock.now) is not None
    assert [v for _, _, v in contents(log)] == [b"w" * 100] * 20


def test_min_compaction_lag_keeps_young_records(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, min_compaction_lag_ms=DAY_MS)
    append(log, keyed([(b"k", b"old")], timestamp=clock.now - 2 * DAY_MS))
    log.roll()
    append(log, keyed([(b"k", b"young")], timestamp=clock.now))
    log.roll()
    append(log, keyed([(b"k", b"active")], timestamp=clock.now))
    cleaner.clean(log, clock.now)
    assert [v for _, _, v in contents(log)] == [b"old", b"young", b"active"]
    clock.now += 2 * DAY_MS
    cleaner.clean(log, clock.now)
    assert [v for _, _, v in contents(log)] == [b"young", b"active"]


def _batches(data):
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        size = records.batch_size_at(view, pos)
        yield bytes(view[pos : pos + size])
        pos += size


def test_a_compacted_log_refuses_records_without_a_key(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    with pytest.raises(InvalidRecord, match="without key"):
        append(log, keyed([(b"k", b"v"), (None, b"v")]))
    assert log.log_end_offset == 0  # nothing of the batch was written
    plain = open_log(tmp_path / "d-0", clock, cleanup_policy="delete")
    assert append(plain, keyed([(None, b"v")])).base_offset == 0


def test_the_last_batch_of_a_cleaning_stays_so_the_range_still_meets_the_next_segment(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    append(log, keyed([(b"k", b"v")]))  # 0
    log.roll()
    append(log, keyed([(b"k", None)]))  # 1: a tombstone, which the first cleaning gives a horizon
    log.roll()
    append(log, keyed([(b"j", b"x")]))  # 2: active
    cleaner.clean(log, clock.now)
    clock.now += DAY_MS  # the horizon: a cleaning of the same range now removes the tombstone
    cleaner.write_checkpoint(log.directory, 0)
    cleaner.clean(log, clock.now)
    assert contents(log) == [(2, b"j", b"x")]
    header = records.read_header(log.read(0, 1 << 20))
    assert (header.base_offset, header.last_offset, header.record_count) == (1, 1, 0)


def test_a_fenced_producers_marker_keeps_its_epoch_without_a_snapshot(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    old = clock.now - 2 * DAY_MS
    append(log, keyed([(b"k", b"zombie")], pid=7, epoch=0, seq=0, txn=True, timestamp=old))  # 0
    end_txn(log, 7, 1, commit=False, timestamp=old)  # 1: the coordinator fenced epoch 0 with epoch 1
    append(log, keyed([(b"k", b"other")]))  # 2
    log.roll()
    append(log, keyed([(b"j", b"x")]))  # 3: active
    cleaner.clean(log, clock.now)
    assert contents(log) == [(2, b"k", b"other"), (3, b"j", b"x")]
    log.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    reopened = open_log(tmp_path / "t-0", clock)
    with pytest.raises(InvalidProducerEpoch):
        append(reopened, keyed([(b"k", b"late")], pid=7, epoch=0, seq=1, txn=True))


def test_a_full_offset_map_ends_the_cleaning_early_and_the_next_goes_on(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    for segment in range(4):
        append(log, keyed([(b"key%d-%d" % (segment, i), b"old") for i in range(10)]))  # 10 new keys each
        append(log, keyed([(b"key%d-%d" % (segment, i), b"new") for i in range(10)]))
        log.roll()
    # Room for about 15 keys: the first segment's 10 keys fit, the second's fill the map.
    first = cleaner.clean(log, clock.now, max_map_bytes=15 * (6 + cleaner.MAP_ENTRY_OVERHEAD))
    assert first is not None and first.end == 40 and first.records_removed == 20
    assert cleaner.read_checkpoint(log.directory) == 40
    values = [v for _, _, v in contents(log)]
    assert values.count(b"old") == 20 and values.count(b"new") == 40  # segments 2 and 3 wait
    cleaner.clean(log, clock.now, max_map_bytes=15 * (6 + cleaner.MAP_ENTRY_OVERHEAD))
    assert [v for _, _, v in contents(log)] == [b"new"] * 40
    assert cleaner.read_checkpoint(log.directory) == 80


def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY_MS)
    append(log, keyed([(b"k%d" % i, b"v" * 100) for i in range(20)], timestamp=clock.now))
    log.roll()
    cleaner.clean(log, clock.now)
    append(log, keyed([(b"k0", b"new")], timestamp=clock.now))  # a small dirty tail
    log.roll()
    assert cleaner.clean(log, clock.now) is None  # below the ratio, and young
    clock.now += DAY_MS + 1
    assert cleaner.clean(log, clock.now) is not None  # it waited max.compaction.lag.ms
    assert [v for _, k, v in contents(log) if k == b"k0"] == [b"new"]
