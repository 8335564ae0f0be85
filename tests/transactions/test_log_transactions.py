"""The log's side of transactions: LSO, the aborted-transaction index (.txnindex), recovery of both."""

from __future__ import annotations

import struct

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from onceflow.protocol import records
from onceflow.protocol.record_codec import encode_batch

CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=100)


def txn_data(log: Log, pid: int, seq: int, count: int = 1, epoch: int = 0) -> int:
    values = [(None, b"p%d-s%d" % (pid, seq + i)) for i in range(count)]
    batch = bytearray(
        encode_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    )
    return log.append(records.validate_produce_records(batch)).base_offset


def plain(log: Log, count: int = 1) -> int:
    batch = bytearray(encode_batch([(None, b"x")] * count))
    return log.append(records.validate_produce_records(batch)).base_offset


def marker(log: Log, pid: int, *, commit: bool, epoch: int = 0) -> int:
    batch = bytearray(
        records.build_control_batch(pid, epoch, commit=commit, coordinator_epoch=0, timestamp_ms=1)
    )
    view = memoryview(batch)
    return log.append([(records.read_header(view), view)], origin=AppendOrigin.COORDINATOR).base_offset


def test_lso_is_the_first_offset_of_the_oldest_open_transaction(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    plain(log, 3)
    assert log.last_stable_offset == log.high_watermark == 3
    first_a = txn_data(log, pid=1, seq=0, count=2)
    txn_data(log, pid=2, seq=0)
    plain(log)
    assert log.last_stable_offset == first_a == 3
    assert log.high_watermark == 7
    marker(log, 1, commit=True)
    assert log.last_stable_offset == 5  # producer 2's transaction is still open
    marker(log, 2, commit=False)
    assert log.last_stable_offset == log.high_watermark == 9
    log.close()


def test_aborted_transactions_are_indexed_with_the_lso_after_them(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    a = txn_data(log, pid=1, seq=0)  # 0
    b = txn_data(log, pid=2, seq=0)  # 1
    abort_a = marker(log, 1, commit=False)  # 2: LSO is then 1 (producer 2 still open)
    commit_b = marker(log, 2, commit=True)  # 3
    c = txn_data(log, pid=3, seq=0)  # 4
    abort_c = marker(log, 3, commit=False)  # 5
    assert (a, b, abort_a, commit_b, c, abort_c) == (0, 1, 2, 3, 4, 5)
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 2, 1), AbortedTxn(3, 4, 5, 6)]
    # Only those overlapping the range: the first ended before offset 3.
    assert log.collect_aborted_transactions(3, 6) == [AbortedTxn(3, 4, 5, 6)]
    assert log.collect_aborted_transactions(0, 1) == [AbortedTxn(1, 0, 2, 1)]
    log.close()


def test_a_resent_marker_completes_nothing_and_indexes_nothing(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    txn_data(log, pid=1, seq=0)
    marker(log, 1, commit=False)
    marker(log, 1, commit=False)  # the coordinator retried after a crash
    assert len(log.collect_aborted_transactions(0, log.log_end_offset)) == 1
    assert log.last_stable_offset == log.high_watermark
    log.close()


def test_index_and_lso_survive_clean_and_unclean_restarts(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    for pid in range(1, 30):  # enough to roll segments
        txn_data(log, pid=pid, seq=0, count=5)
        marker(log, pid, commit=pid % 2 == 0)
    open_first = txn_data(log, pid=99, seq=0)
    expected = log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(expected) == 15
    assert len(log.segment_base_offsets()) > 1
    assert list(directory.glob("*.txnindex"))
    log.close()

    log = Log.open(directory, CONFIG)  # clean
    assert log.collect_aborted_transactions(0, log.log_end_offset) == expected
    assert log.last_stable_offset == open_first
    log.abandon()

    # Unclean, with the active segment's index gone and a torn entry in another: rebuilt by replay.
    for path in directory.glob("*.txnindex"):
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x01")
    log = Log.open(directory, CONFIG)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == expected
    assert log.last_stable_offset == open_first
    marker(log, 99, commit=False)
    assert log.last_stable_offset == log.high_watermark
    log.close()


def test_truncation_drops_index_entries_beyond_the_new_end(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    txn_data(log, pid=1, seq=0)
    marker(log, 1, commit=False)  # 1
    txn_data(log, pid=2, seq=0)  # 2
    marker(log, 2, commit=False)  # 3
    log.truncate_to(3)
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    assert log.last_stable_offset == 2  # producer 2's transaction is open again
    log.close()


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2_000, retention_bytes=2_500))
    for pid in range(1, 30):
        txn_data(log, pid=pid, seq=0, count=5)
        marker(log, pid, commit=False)
    before = len(list((tmp_path / "t-0").glob("*.txnindex")))
    assert log.apply_retention() > 0
    after = sorted((tmp_path / "t-0").glob("*.txnindex"))
    assert len(after) < before
    assert all(t.last_offset >= log.log_start_offset for t in log.collect_aborted_transactions(0, 10**9))
    log.close()


def test_txn_index_file_format_is_kafkas(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(7, 10, 20, 15))
    index.close()
    raw = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert len(raw) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", raw) == (0, 7, 10, 20, 15)
    assert TransactionIndex(tmp_path / "00000000000000000000.txnindex").entries == [AbortedTxn(7, 10, 20, 15)]
