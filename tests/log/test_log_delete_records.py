"""Log.delete_records_before (DeleteRecords): a log start inside a segment, kept across restarts and
crashes, and respected by reads, timestamps, retention and the last stable offset."""

from __future__ import annotations

import pytest
from tests.log.batches import decode, make_batch, produce

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.log import LOG_START_OFFSET_FILE, Log
from onceflow.protocol import records
from onceflow.protocol.errors import OffsetOutOfRange
from onceflow.protocol.record_codec import encode_batch


def open_log(tmp_path, **config) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(**config))


def three_segments(log: Log) -> None:
    """Offsets 0-3, 4-7 and 8-11, one segment each (the last one active)."""
    for segment in range(3):
        produce(
            log,
            make_batch(2, timestamp=1_000 + segment * 100),
            make_batch(2, timestamp=1_050 + segment * 100),
        )
        if segment < 2:
            log.roll()


def test_start_moves_inside_a_segment_and_reads_below_it_are_out_of_range(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    assert log.delete_records_before(6) == 6
    assert log.log_start_offset == 6
    assert log.segment_base_offsets() == [4, 8]  # 0-3 went; 4-7 holds the new start
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 10**6)
    # a read stops at the end of a segment
    assert [offset for offset, _, _ in decode(log.read(6, 10**6))] == [6, 7]
    assert [offset for offset, _, _ in decode(log.read(8, 10**6))] == [8, 9, 10, 11]
    log.close()


def test_lower_or_equal_offset_changes_nothing(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    log.delete_records_before(6)
    assert log.delete_records_before(3) == 6
    assert log.delete_records_before(6) == 6
    assert log.segment_base_offsets() == [4, 8]
    log.close()


@pytest.mark.parametrize("offset", [-2, 13])
def test_offset_outside_zero_to_high_watermark_is_out_of_range(tmp_path, offset):
    log = open_log(tmp_path)
    three_segments(log)
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(offset)
    assert log.log_start_offset == 0
    assert not (log.directory / LOG_START_OFFSET_FILE).exists()
    log.close()


def test_up_to_the_high_watermark_keeps_the_active_segment_and_appends_go_on(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    assert log.delete_records_before(12) == 12
    assert log.segment_base_offsets() == [8]
    assert log.read(12, 10**6) == b""
    assert produce(log, make_batch(1)).base_offset == 12
    assert [offset for offset, _, _ in decode(log.read(12, 10**6))] == [12]
    log.close()


def test_start_survives_a_clean_restart_and_a_crash(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    log.delete_records_before(6)
    log.close()
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (6, 12)
    log.delete_records_before(9)
    log.abandon()  # as after kill -9: no clean-shutdown marker
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.segment_base_offsets()) == (9, [8])
    with pytest.raises(OffsetOutOfRange):
        log.read(8, 10**6)
    log.close()


def test_segments_left_below_the_start_by_a_crash_are_deleted_at_open(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    log.close()
    # the start was written, then the process died before deleting the segments below it
    (tmp_path / "topic-0" / LOG_START_OFFSET_FILE).write_text("9\n")
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.segment_base_offsets()) == (9, [8])
    log.close()


def test_unreadable_start_file_keeps_every_record(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)
    log.close()
    (tmp_path / "topic-0" / LOG_START_OFFSET_FILE).write_text("garbage")
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (0, 12)
    log.close()


def test_retention_past_the_start_takes_over(tmp_path):
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=1)
    three_segments(log)
    log.delete_records_before(2)
    assert log.apply_retention() == 2
    assert log.log_start_offset == 8
    log.close()
    assert open_log(tmp_path).log_start_offset == 8


def test_offset_for_timestamp_never_answers_below_the_start(tmp_path):
    log = open_log(tmp_path)
    three_segments(log)  # offset 4 has timestamp 1100, offset 6 has 1150
    assert log.offset_for_timestamp(1_100) == (4, 1_100)
    log.delete_records_before(5)
    assert log.offset_for_timestamp(1_100) == (5, 1_101)
    assert log.offset_for_timestamp(0) == (5, 1_101)
    log.close()


def test_last_stable_offset_of_a_transaction_begun_below_the_start_is_the_start(tmp_path):
    log = open_log(tmp_path)
    produce(log, make_batch(2))  # 0-1
    txn = encode_batch([(None, b"t")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    log.append(records.validate_produce_records(bytearray(txn)))  # 2, left open
    produce(log, make_batch(3))  # 3-5
    assert log.last_stable_offset == 2
    log.delete_records_before(4)
    assert log.last_stable_offset == 4
    header, marker = records.control_batch_for_append(
        7, 0, commit=True, coordinator_epoch=0, timestamp_ms=2_000
    )
    log.append([(header, memoryview(marker))], origin=AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == log.high_watermark == 7
    log.close()
