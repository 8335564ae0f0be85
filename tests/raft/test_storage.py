"""The storage contract, run against both implementations (memory for the simulator, files for a
real node), and what only the files add: Kafka's names and formats, recovery on open."""

from __future__ import annotations

import json
import random

import pytest

from onceflow.protocol.record_codec import split_batches
from onceflow.raft.errors import QuorumViolation
from onceflow.raft.file_storage import (
    METADATA_PARTITION,
    FileStorage,
    QuorumStateError,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from onceflow.raft.memory_storage import MemoryStorage
from onceflow.raft.records import Batch, LeaderChange, OffsetAndEpoch
from onceflow.raft.snapshot_format import encode_snapshot, open_snapshot
from onceflow.raft.storage import ElectionState, FetchCheck


@pytest.fixture(params=["memory", "files"])
def storage(request, tmp_path):
    if request.param == "memory":
        return MemoryStorage()
    return FileStorage(tmp_path)


def batches(*spec: tuple[int, int]) -> list[Batch]:
    """Consecutive batches from ``(epoch, records)`` pairs; a count of 0 is a LeaderChange."""
    out, offset = [], 0
    for epoch, count in spec:
        if count == 0:
            out.append(Batch(offset, epoch, 1000 + offset, (), LeaderChange(1, (1, 2, 3), (1, 2))))
        else:
            out.append(
                Batch(offset, epoch, 1000 + offset, tuple(b"r%d" % (offset + i) for i in range(count)))
            )
        offset = out[-1].next_offset
    return out


def test_append_read_and_epochs(storage) -> None:
    written = batches((1, 0), (1, 3), (2, 0), (2, 2), (4, 0), (4, 1))
    storage.append(written)
    storage.flush()
    assert storage.read(0, 1 << 20) == written
    assert storage.read(4, 1 << 20) == written[2:]
    assert storage.read(4, 1 << 20, end_offset=7) == written[2:4]
    assert storage.end_offset_and_epoch() == OffsetAndEpoch(9, 4)
    assert storage.end_offset_for_epoch(1) == OffsetAndEpoch(4, 1)
    assert storage.end_offset_for_epoch(3) == OffsetAndEpoch(7, 2)  # no epoch 3: where epoch 2 ends
    assert storage.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert storage.epoch_before(7) == 2 and storage.epoch_before(8) == 4
    with pytest.raises(QuorumViolation):
        storage.append([Batch(9, 3, 0, (b"epochs never go down",))])
    with pytest.raises(QuorumViolation):
        storage.append([Batch(11, 4, 0, (b"a gap",))])


def test_what_a_follower_is_told(storage) -> None:
    storage.append(batches((1, 0), (1, 3), (2, 0), (2, 2), (4, 0), (4, 1)))
    assert storage.check_fetch(0, 0) == (FetchCheck.VALID, None)
    assert storage.check_fetch(4, 1) == (FetchCheck.VALID, None)
    assert storage.check_fetch(6, 2) == (FetchCheck.VALID, None)
    assert storage.check_fetch(6, 1) == (FetchCheck.DIVERGING, OffsetAndEpoch(4, 1))  # epoch 1 ended at 4
    assert storage.check_fetch(9, 3) == (FetchCheck.DIVERGING, OffsetAndEpoch(7, 2))  # no epoch 3 here
    assert storage.check_fetch(12, 4) == (FetchCheck.DIVERGING, OffsetAndEpoch(9, 4))  # beyond our end


def test_truncation_is_by_whole_batches_and_forgets_epochs(storage) -> None:
    storage.append(batches((1, 0), (1, 3), (2, 0), (2, 2)))
    assert storage.truncate_to_end_offset(OffsetAndEpoch(4, 1)) == 4
    assert storage.end_offset_and_epoch() == OffsetAndEpoch(4, 1)
    storage.append([Batch(4, 3, 0, (b"new",))])
    assert storage.read(4, 100) == [Batch(4, 3, 0, (b"new",))]


def test_snapshots_move_the_log_start(storage) -> None:
    storage.append(batches((1, 0), (1, 3), (2, 0), (2, 2)))
    storage.flush()
    first, second = OffsetAndEpoch(4, 1), OffsetAndEpoch(7, 2)
    for snapshot_id in (first, second):
        storage.write_snapshot(snapshot_id, encode_snapshot(snapshot_id, [b"state"], 0))
    storage.delete_before(first)
    assert storage.log_start_offset == 4 and storage.read(4, 1 << 20)[0].base_offset == 4
    assert storage.check_fetch(2, 1) == (FetchCheck.SNAPSHOT, second)
    storage.delete_before(second)
    assert storage.snapshot_ids() == [second] and storage.log_start_offset == 7
    assert storage.end_offset_and_epoch() == OffsetAndEpoch(7, 2)
    assert open_snapshot(second, storage.read_snapshot(second)).records is not None
    far = OffsetAndEpoch(50, 6)
    storage.write_snapshot(far, encode_snapshot(far, [b"far"], 0))
    storage.reset_to_snapshot(far)
    assert (storage.log_start_offset, storage.log_end_offset) == (50, 50)
    assert storage.end_offset_and_epoch() == far and storage.snapshot_ids() == [far]
    storage.append([Batch(50, 7, 0, (b"after",))])
    assert storage.read(50, 100)[0].records == (b"after",)


def test_a_power_cut_keeps_what_was_flushed_and_a_kill_keeps_everything() -> None:
    storage = MemoryStorage()
    written = batches((1, 0), (1, 3), (2, 0))
    storage.append(written[:2])
    storage.flush()
    storage.append(written[2:])
    storage.write_election(ElectionState(2, leader_id=1))
    killed = storage.crash(random.Random(1), power_cut=False)
    assert killed.read(0, 1 << 20) == written and killed.read_election() == ElectionState(2, leader_id=1)
    cuts = {tuple(storage.crash(random.Random(seed), power_cut=True).read(0, 1 << 20)) for seed in range(20)}
    assert tuple(written[:2]) in cuts and all(cut[:2] == tuple(written[:2]) for cut in cuts)


# --- files only ----------------------------------------------------------------------------


def test_the_files_are_kafkas(tmp_path) -> None:
    storage = FileStorage(tmp_path)
    storage.write_election(ElectionState(3, leader_id=2, voted_id=None, voters=(1, 2, 3)))
    storage.append(batches((1, 0), (1, 2), (3, 1)))
    storage.flush()
    directory = tmp_path / METADATA_PARTITION
    state = json.loads((directory / "quorum-state").read_text())
    assert state == {
        "clusterId": "",
        "leaderId": 2,
        "leaderEpoch": 3,
        "votedId": -1,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }
    raw = (directory / "00000000000000000000.log").read_bytes()
    headers = [header for header, _ in split_batches(raw)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers] == [
        (0, 1, True),
        (1, 1, False),
        (3, 3, False),
    ]
    snapshot_id = OffsetAndEpoch(3, 1)
    storage.write_snapshot(snapshot_id, encode_snapshot(snapshot_id, [b"x"], 0))
    assert (directory / "00000000000000000003-0000000001.checkpoint").exists()
    assert parse_snapshot_file_name(snapshot_file_name(snapshot_id)) == snapshot_id


def test_everything_is_there_after_a_reopen(tmp_path) -> None:
    storage = FileStorage(tmp_path)
    written = batches((1, 0), (1, 3), (2, 0), (2, 2), (4, 1))
    storage.append(written)
    storage.write_election(ElectionState(4, voted_id=3, voters=(1, 2, 3)))
    snapshot_id = OffsetAndEpoch(4, 1)
    storage.write_snapshot(snapshot_id, encode_snapshot(snapshot_id, [b"s"], 0))
    storage.delete_before(snapshot_id)
    storage.abandon()  # as after kill -9: no flush, no clean-shutdown marker
    again = FileStorage(tmp_path)
    assert again.read_election() == ElectionState(4, None, 3, (1, 2, 3))
    assert again.log_start_offset == 4 and again.read(4, 1 << 20) == written[2:]
    assert again.end_offset_for_epoch(3) == OffsetAndEpoch(7, 2) and again.snapshot_ids() == [snapshot_id]


def test_a_crash_between_fetching_a_snapshot_and_moving_the_log_is_finished_on_open(tmp_path) -> None:
    storage = FileStorage(tmp_path)
    storage.append(batches((1, 0), (1, 2)))
    storage.flush()
    ahead = OffsetAndEpoch(40, 5)
    storage.write_snapshot(ahead, encode_snapshot(ahead, [b"s"], 0))
    (tmp_path / METADATA_PARTITION / ("x" + ".checkpoint.part")).write_bytes(b"half a snapshot")
    storage.abandon()
    again = FileStorage(tmp_path)
    assert (again.log_start_offset, again.log_end_offset) == (40, 40)
    assert again.end_offset_and_epoch() == ahead
    assert not list((tmp_path / METADATA_PARTITION).glob("*.part"))


def test_a_damaged_quorum_state_is_an_error_not_a_fresh_start(tmp_path) -> None:
    FileStorage(tmp_path).write_election(ElectionState(2, voted_id=1))
    (tmp_path / METADATA_PARTITION / "quorum-state").write_text("{not json")
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileStorage(tmp_path)


def test_a_quorum_on_files_replicates_and_a_restarted_node_replays_it(tmp_path) -> None:
    from tests.raft.harness import Harness

    h = Harness(storage_for=lambda node_id: FileStorage(tmp_path / str(node_id)))
    leader = h.elect()
    h.append([b"one", b"two"])
    h.run(300)
    follower = next(i for i in h.voters if i != leader.node_id)
    h.storages[follower].abandon()
    h.down.add(follower)
    h.storages[follower] = FileStorage(tmp_path / str(follower))
    h.values[follower] = []
    h.start(follower)
    h.append([b"three"])
    h.run(1000)
    assert h.values[follower] == [b"one", b"two", b"three"]
    assert h.nodes[follower].state.leader_id == leader.node_id
