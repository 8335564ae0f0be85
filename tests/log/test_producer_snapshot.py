"""Producer snapshots: the file format, atomic writes, and recovery (reload, corrupt fallback, truncation)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from onceflow.log.producer_entry import BatchMetadata, ProducerStateEntry
from onceflow.log.producer_snapshot import (
    CorruptSnapshot,
    decode_snapshot,
    delete_snapshots_after,
    delete_snapshots_before,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from onceflow.log.producer_state import AppendOrigin, ProducerStateManager
from onceflow.protocol.errors import ErrorCode, OutOfOrderSequence

TP = "t-0"
PID = 7

ENTRIES = [
    ProducerStateEntry(
        producer_id=7,
        epoch=3,
        batches=tuple(
            BatchMetadata(s, s + 4, 100 + s, 104 + s, 1_700_000_000_000 + s) for s in range(0, 25, 5)
        ),
        coordinator_epoch=-1,
        last_timestamp=1_700_000_000_020,
        current_txn_first_offset=None,
    ),
    ProducerStateEntry(
        producer_id=2**62,
        epoch=32767,
        batches=(BatchMetadata(2**31 - 2, 1, 500, 503, -1),),
        coordinator_epoch=12,
        last_timestamp=-1,
        current_txn_first_offset=480,
    ),
    ProducerStateEntry(producer_id=9, epoch=0, batches=(), coordinator_epoch=2, last_timestamp=5),
]


class Partition:
    """The producer-state side of a log: appends (with the duplicate check first), rolls, restarts."""

    def __init__(self, directory: Path, *, expiration_ms: int = 86_400_000) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.state = ProducerStateManager(TP, producer_id_expiration_ms=expiration_ms)
        self.log: list[tuple[int, int, int, int, int, int, bool]] = []  # pid, epoch, seqs, offsets, txn

    @property
    def log_end(self) -> int:
        return self.log[-1][5] + 1 if self.log else 0

    def produce(self, epoch, first_seq, last_seq, *, pid=PID, timestamp=1000, transactional=False):
        duplicate = self.state.find_duplicate_batch(pid, epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset, True
        first_offset = self.log_end
        last_offset = first_offset + (last_seq - first_seq) % 2**31
        info = self.state.prepare_update(pid, AppendOrigin.CLIENT)
        info.append_data_batch(
            epoch, first_seq, last_seq, timestamp, first_offset, last_offset, transactional
        )
        self.log.append((pid, epoch, first_seq, last_seq, first_offset, last_offset, transactional))
        self.state.update(info)
        self.state.update_map_end_offset(last_offset + 1)
        return first_offset, last_offset, False

    def roll(self) -> Path | None:
        return self.state.take_snapshot(self.directory)

    def truncate_to(self, offset: int) -> int:
        self.log = [b for b in self.log if b[5] < offset]
        return self._reload(self.state)

    def restart(self, *, now_ms: int | None = None) -> int:
        return self._reload(ProducerStateManager(TP, producer_id_expiration_ms=self.expiration_ms), now_ms)

    def _reload(self, state: ProducerStateManager, now_ms: int | None = None) -> int:
        replay_from = state.truncate_and_reload(0, self.log_end, self.directory, now_ms=now_ms)
        for pid, epoch, first_seq, last_seq, first_offset, last_offset, txn in self.log:
            if first_offset >= replay_from:
                info = state.prepare_update(pid, AppendOrigin.REPLICATION)
                info.append_data_batch(epoch, first_seq, last_seq, 1000, first_offset, last_offset, txn)
                state.update(info)
                state.update_map_end_offset(last_offset + 1)
        self.state = state
        return replay_from


def produce_run(
    partition: Partition, first_seq: int, count: int, size: int = 2
) -> list[tuple[int, int, int, int]]:
    out = []
    for i in range(count):
        seq = first_seq + i * size
        first_offset, last_offset, dup = partition.produce(0, seq, seq + size - 1)
        assert not dup
        out.append((seq, seq + size - 1, first_offset, last_offset))
    return out


# -- format ----------------------------------------------------------------------------------------


def test_encode_decode_round_trip_keeps_every_field_and_all_five_batches():
    by_pid = sorted(ENTRIES, key=lambda e: e.producer_id)
    assert decode_snapshot(encode_snapshot(ENTRIES)) == by_pid
    assert decode_snapshot(encode_snapshot([])) == []


def test_layout_starts_with_version_then_crc32c_of_the_rest():
    import crc32c

    data = encode_snapshot(ENTRIES)
    version, crc = struct.unpack_from(">hI", data, 0)
    assert version == 2
    assert crc == crc32c.crc32c(data[6:])
    count, slots, open_txns = struct.unpack_from(">ibi", data, 6)
    assert (count, slots, open_txns) == (len(ENTRIES), 5, 1)
    assert struct.unpack_from(">qq", data, 15) == (2**62, 480)
    # fixed-size rows sorted by producer id follow, each with five batch slots
    rows_at = 15 + 16
    row_size = 31 + 5 * 32
    assert len(data) == rows_at + 3 * row_size
    assert [struct.unpack_from(">q", data, rows_at + i * row_size)[0] for i in range(3)] == [7, 9, 2**62]


def encode_v1(entries) -> bytes:
    """The version-1 layout (variable-size entries in file order), as the previous release wrote it."""
    import crc32c

    body = struct.pack(">i", len(entries))
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += struct.pack(
            ">qhiqqb", e.producer_id, e.epoch, e.coordinator_epoch, e.last_timestamp, txn, len(e.batches)
        )
        for b in e.batches:
            body += struct.pack(">iiqqq", b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_version_1_snapshots_are_still_read(tmp_path):
    assert decode_snapshot(encode_v1(ENTRIES)) == sorted(ENTRIES, key=lambda e: e.producer_id)
    snapshot_path(tmp_path, 30).write_bytes(encode_v1(ENTRIES))
    state = ProducerStateManager(TP)
    assert state.load_latest(tmp_path, 0, 30) == 30
    assert state.last_entry(7) == ENTRIES[0]
    assert state.first_unstable_offset() == 480
    # the next snapshot is written in the current version
    state.update_map_end_offset(40)
    path = state.take_snapshot(tmp_path)
    assert struct.unpack_from(">h", path.read_bytes(), 0)[0] == 2
    assert read_snapshot(path) == sorted(ENTRIES, key=lambda e: e.producer_id)


def test_snapshot_after_a_lazy_load_copies_untouched_rows_and_merges_changed_ones(tmp_path):
    many = [
        ProducerStateEntry(pid, 0, (BatchMetadata(0, 1, pid * 10, pid * 10 + 1, 1000 + pid),), -1, 1000 + pid)
        for pid in range(2, 400, 2)
    ]
    write_snapshot(tmp_path, 10, many)
    state = ProducerStateManager(TP)
    state.load_latest(tmp_path, 0, 10)
    assert state.producer_count == len(many)
    # touch a few: a new producer between two loaded ones, a changed one, one at each end
    for pid, seq in ((3, 0), (100, 2), (2, 2), (398, 2), (1000, 0)):
        info = state.prepare_update(pid, AppendOrigin.CLIENT)
        info.append_data_batch(0, seq, seq + 1, 5000, 20, 21, False)
        state.update(info)
    state.update_map_end_offset(22)
    path = state.take_snapshot(tmp_path)
    reloaded = ProducerStateManager(TP)
    reloaded.load_latest(tmp_path, 0, 22)
    assert reloaded.producer_count == len(many) + 2
    assert reloaded.active_producers() == state.active_producers()
    assert [b.first_seq for b in reloaded.last_entry(100).batches] == [0, 2]
    assert reloaded.last_entry(3).batches[0].first_offset == 20
    assert read_snapshot(path) == reloaded.active_producers()


def test_expiry_reaches_loaded_rows_that_were_never_looked_up(tmp_path):
    entries = [
        ProducerStateEntry(1, 0, (BatchMetadata(0, 0, 0, 0, 100),), -1, 100),
        ProducerStateEntry(2, 0, (BatchMetadata(0, 0, 1, 1, 5000),), -1, 5000),
        ProducerStateEntry(3, 0, (BatchMetadata(0, 0, 2, 2, 100),), -1, 100, current_txn_first_offset=2),
    ]
    write_snapshot(tmp_path, 3, entries)
    state = ProducerStateManager(TP, producer_id_expiration_ms=1000)
    state.load_latest(tmp_path, 0, 3)
    assert state.remove_expired_producers(now_ms=2000) == [1]
    assert state.last_entry(1) is None
    assert [e.producer_id for e in state.active_producers()] == [2, 3]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[:-1], id="truncated"),
        pytest.param(lambda d: d[:5], id="shorter-than-header"),
        pytest.param(lambda d: b"", id="empty"),
        pytest.param(lambda d: d[:20] + bytes([d[20] ^ 0x01]) + d[21:], id="bit-flip"),
        pytest.param(lambda d: d + b"\x00", id="trailing-byte"),
        pytest.param(lambda d: struct.pack(">h", 99) + d[2:], id="unknown-version"),
    ],
)
def test_damaged_snapshot_is_rejected_as_corrupt(tmp_path, damage):
    path = snapshot_path(tmp_path, 10)
    path.write_bytes(damage(encode_snapshot(ENTRIES)))
    with pytest.raises(CorruptSnapshot) as raised:
        read_snapshot(path)
    assert str(path) in str(raised.value)
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_consistent_crc_over_an_impossible_batch_count_is_still_corrupt():
    import crc32c

    body = (
        struct.pack(">i", 1)
        + struct.pack(">qhiqqb", 1, 0, -1, 0, -1, 6)
        + struct.pack(">iiqqq", 0, 0, 0, 0, 0) * 6
    )
    data = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    with pytest.raises(CorruptSnapshot, match="6 batches"):
        decode_snapshot(data)
    # version 2: six batch slots per row
    body = struct.pack(">ibi", 0, 6, 0)
    with pytest.raises(CorruptSnapshot, match="batch slots 6"):
        decode_snapshot(struct.pack(">hI", 2, crc32c.crc32c(body)) + body)


def test_consistent_crc_over_unsorted_rows_is_still_corrupt():
    import crc32c

    data = encode_snapshot(ENTRIES)
    rows_at, row_size = 15 + 16, 31 + 5 * 32
    body = bytearray(data[6:])
    first = bytes(body[rows_at - 6 : rows_at - 6 + row_size])
    body[rows_at - 6 : rows_at - 6 + row_size] = body[rows_at - 6 + row_size : rows_at - 6 + 2 * row_size]
    body[rows_at - 6 + row_size : rows_at - 6 + 2 * row_size] = first
    with pytest.raises(CorruptSnapshot, match="strictly increasing"):
        decode_snapshot(struct.pack(">hI", 2, crc32c.crc32c(body)) + bytes(body))


# -- files -----------------------------------------------------------------------------------------


def test_write_snapshot_is_named_by_offset_and_leaves_no_temp_file(tmp_path):
    path = write_snapshot(tmp_path, 1234, ENTRIES)
    assert path.name == "00000000000000001234.snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert read_snapshot(path) == sorted(ENTRIES, key=lambda e: e.producer_id)


def test_list_snapshots_is_sorted_and_ignores_other_files(tmp_path):
    for offset in (300, 5, 40):
        write_snapshot(tmp_path, offset, [])
    (tmp_path / "00000000000000000007.snapshot.tmp").write_bytes(b"half")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert [s.offset for s in list_snapshots(tmp_path)] == [5, 40, 300]
    assert list_snapshots(tmp_path / "missing") == []


def test_delete_snapshots_after_and_before(tmp_path):
    for offset in (10, 20, 30, 40, 50):
        write_snapshot(tmp_path, offset, [])
    assert delete_snapshots_after(tmp_path, 40) == [50]
    assert delete_snapshots_before(tmp_path, 35) == [10, 20]
    assert [s.offset for s in list_snapshots(tmp_path)] == [30, 40]
    # the newest couple survive even when everything is older than the cut
    assert delete_snapshots_before(tmp_path, 1000) == []
    assert delete_snapshots_before(tmp_path, 1000, keep_latest=1) == [30]


# -- recovery --------------------------------------------------------------------------------------


def test_clean_restart_reloads_the_snapshot_and_still_catches_every_cached_duplicate(tmp_path):
    partition = Partition(tmp_path)
    batches = produce_run(partition, 0, 7)
    assert partition.roll() == snapshot_path(tmp_path, partition.log_end)  # clean shutdown
    assert partition.restart() == partition.log_end  # nothing to replay
    for first_seq, last_seq, first_offset, last_offset in batches[-5:]:
        assert partition.produce(0, first_seq, last_seq) == (first_offset, last_offset, True)
    with pytest.raises(OutOfOrderSequence):
        partition.produce(0, *batches[-6][:2])
    assert partition.produce(0, 14, 15) == (14, 15, False)


def test_crash_restart_replays_the_log_after_the_newest_snapshot(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 3)
    partition.roll()  # snapshot at 6
    batches = produce_run(partition, 6, 4)
    assert partition.restart() == 6
    entry = partition.state.last_entry(PID)
    assert [b.first_seq for b in entry.batches] == [4, 6, 8, 10, 12]
    assert partition.state.map_end_offset == partition.log_end
    assert partition.produce(0, *batches[0][:2]) == (*batches[0][2:], True)


def test_taking_a_snapshot_twice_at_the_same_offset_writes_once(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 1)
    assert partition.roll() is not None
    assert partition.roll() is None
    assert [s.offset for s in list_snapshots(tmp_path)] == [2]


def test_corrupt_newest_snapshot_is_deleted_and_the_previous_one_used(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 2)
    partition.roll()  # 4
    produce_run(partition, 4, 2)
    newest = partition.roll()  # 8
    newest.write_bytes(newest.read_bytes()[:-3])
    assert partition.restart() == 4
    assert [s.offset for s in list_snapshots(tmp_path)] == [4]
    assert [b.first_seq for b in partition.state.last_entry(PID).batches] == [0, 2, 4, 6]


def test_all_snapshots_corrupt_means_a_full_replay_from_the_log_start(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 3)
    partition.roll().write_bytes(b"\x00\x01garbage")
    assert partition.restart() == 0
    assert list_snapshots(tmp_path) == []
    assert partition.state.last_entry(PID).last_seq == 5


def test_truncation_drops_snapshots_beyond_the_new_end_and_rebuilds_the_window(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 2)
    partition.roll()  # 4
    produce_run(partition, 4, 2)
    partition.roll()  # 8
    produce_run(partition, 8, 1)
    assert partition.truncate_to(6) == 4
    assert [s.offset for s in list_snapshots(tmp_path)] == [4]
    entry = partition.state.last_entry(PID)
    assert [b.first_seq for b in entry.batches] == [0, 2, 4]
    assert partition.state.map_end_offset == 6
    # the truncated batch is no longer known: resending it is a new append at the new end
    assert partition.produce(0, 6, 7) == (6, 7, False)


def test_truncate_and_reload_without_truncation_keeps_the_state(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 2)
    state = partition.state
    assert state.truncate_and_reload(0, 4, tmp_path) == 4
    assert state.last_entry(PID).last_seq == 3


def test_snapshots_outside_the_log_are_deleted_but_one_at_the_log_start_is_kept(tmp_path):
    for offset in (5, 10, 20, 99):
        write_snapshot(tmp_path, offset, ENTRIES[:1])
    state = ProducerStateManager(TP)
    assert state.load_latest(tmp_path, 10, 50) == 20
    assert [s.offset for s in list_snapshots(tmp_path)] == [10, 20]
    assert state.last_entry(PID) == ENTRIES[0]


def test_loading_skips_producers_already_expired_but_keeps_open_transactions(tmp_path):
    partition = Partition(tmp_path, expiration_ms=1000)
    partition.produce(0, 0, 1, pid=1, timestamp=5_000)
    partition.produce(0, 0, 1, pid=2, timestamp=5_000, transactional=True)
    partition.produce(0, 0, 1, pid=3, timestamp=9_500)
    partition.roll()
    partition.restart(now_ms=10_000)
    assert [e.producer_id for e in partition.state.active_producers()] == [2, 3]
    assert partition.state.first_unstable_offset() == 2


def test_a_half_written_temp_snapshot_is_cleaned_up_and_ignored(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 1)
    partition.roll()
    (tmp_path / "00000000000000000009.snapshot.tmp").write_bytes(b"torn")
    assert partition.restart() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000002.snapshot"]


def test_truncate_fully_forgets_everything(tmp_path):
    partition = Partition(tmp_path)
    produce_run(partition, 0, 2)
    partition.roll()
    partition.state.truncate_fully_and_start_at(100, tmp_path)
    assert partition.state.active_producers() == []
    assert partition.state.map_end_offset == 100
    assert list_snapshots(tmp_path) == []
