"""The leader epoch cache and its checkpoint file (Kafka's LeaderEpochFileCache rules and file format)."""

from __future__ import annotations

import pytest

from onceflow.log.checkpoint_file import CorruptCheckpoint, read_checkpoint
from onceflow.log.leader_epoch import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from onceflow.log.offset_checkpoint import read_offsets, write_offsets

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache(*pairs, path=None) -> LeaderEpochCache:
    return LeaderEpochCache(path, [EpochEntry(e, o) for e, o in pairs])


def pairs(c: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in c.entries()]


def test_assign_records_new_epochs_and_keeps_the_first_start_of_each():
    c = cache()
    assert c.latest_epoch is None
    assert c.assign(2, 6)
    assert not c.assign(2, 7)  # the same epoch later on: nothing changes
    assert c.assign(3, 9)
    assert pairs(c) == [(2, 6), (3, 9)]
    assert c.latest_epoch == 3


def test_assign_of_an_earlier_start_for_the_latest_epoch_replaces_it():
    c = cache((1, 11))
    assert c.assign(1, 10)
    assert pairs(c) == [(1, 10)]


def test_assign_drops_the_entries_it_contradicts():
    c = cache((2, 6), (3, 8), (4, 11))
    c.assign(3, 7)  # epoch 3 from 7: the old 3 and the later 4 cannot stand
    assert pairs(c) == [(2, 6), (3, 7)]
    c.assign(5, 7)  # a new epoch at an offset where 3 started: 3 wrote nothing
    assert pairs(c) == [(2, 6), (5, 7)]


def test_negative_entries_are_refused():
    with pytest.raises(ValueError):
        cache().assign(-1, 0)
    with pytest.raises(ValueError):
        cache().assign(0, -1)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, UNDEFINED),
        (5, (5, 100)),  # the latest epoch ends at the log end
        (4, (4, 20)),
        (3, (2, 11)),  # unknown, between two known epochs: the one below, ending where the next starts
        (2, (2, 11)),
        (1, (1, 6)),  # below every known epoch: the first known start
        (6, UNDEFINED),  # above every known epoch
    ],
)
def test_end_offset_for(requested, expected):
    assert cache((2, 6), (4, 11), (5, 20)).end_offset_for(requested, 100) == expected


def test_end_offset_for_an_empty_cache_is_undefined():
    assert cache().end_offset_for(3, 10) == UNDEFINED


def test_truncate_from_end_drops_entries_starting_at_or_after_the_end():
    c = cache((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_end(12) == []
    assert pairs(c) == [(2, 6), (3, 8), (4, 11)]
    c.truncate_from_end(9)
    assert pairs(c) == [(2, 6), (3, 8)]
    c.truncate_from_end(8)
    assert pairs(c) == [(2, 6)]
    c.truncate_from_end(0)
    assert pairs(c) == []


def test_truncate_from_start_moves_the_surviving_epoch_up_to_the_start():
    c = cache((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_start(6) == []
    c.truncate_from_start(8)
    assert pairs(c) == [(3, 8), (4, 11)]
    c.truncate_from_start(9)
    assert pairs(c) == [(3, 9), (4, 11)]
    c.truncate_from_start(30)
    assert pairs(c) == [(4, 30)]


def test_epoch_for_offset_and_previous_epoch():
    c = cache((2, 6), (4, 11))
    assert [c.epoch_for_offset(o) for o in (0, 6, 10, 11, 50)] == [None, 2, 2, 4, 4]
    assert (c.previous_epoch(4), c.previous_epoch(3), c.previous_epoch(2)) == (2, 2, None)


def test_checkpoint_file_is_kafkas_format_and_survives_a_reload(tmp_path):
    c = LeaderEpochCache.load(tmp_path)
    assert not (tmp_path / CHECKPOINT_FILE).exists()  # nothing written before the first epoch
    c.assign(0, 0)
    c.assign(3, 1045)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 1045\n"
    c.truncate_from_end(1045)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(0, 0)]
    c.clear()
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n0\n"


@pytest.mark.parametrize(
    "text",
    ["1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\nzero 0\n", "0\n1\n0 0 0\n", "x\n"],
)
def test_a_damaged_checkpoint_is_rebuilt_from_the_batches(tmp_path, text):
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    with pytest.raises(CorruptCheckpoint):
        read_checkpoint(
            tmp_path / CHECKPOINT_FILE, 0, lambda f: (int(f[0]), int(f[1])) if len(f) == 2 else int("x")
        )
    batches = [(-1, 0), (0, 2), (0, 5), (2, 9), (2, 12), (5, 20)]
    c = LeaderEpochCache.load(tmp_path, rebuild=lambda: iter(batches))
    assert pairs(c) == [(0, 2), (2, 9), (5, 20)]
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(0, 2), (2, 9), (5, 20)]  # and written back


def test_high_watermark_checkpoint_format(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    assert read_offsets(path) == {}
    write_offsets(path, {("b", 1): 7, ("a", 0): 42, ("a", 10): 0})
    assert path.read_text() == "0\n3\na 0 42\na 10 0\nb 1 7\n"
    assert read_offsets(path) == {("a", 0): 42, ("a", 10): 0, ("b", 1): 7}
    path.write_text("0\n2\na 0 42\n")  # the count disagrees: reported, read as nothing
    assert read_offsets(path) == {}
