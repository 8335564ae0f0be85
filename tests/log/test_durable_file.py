"""The one durable-write helper: temp file, fsync, rename, fsync of the directory, for every file the
broker rewrites whole (indexes, snapshots, topics.json, the producer-id block, ...)."""

import os
import stat

import pytest

from onceflow.broker.topics import TopicManager
from onceflow.broker.txn.pid_manager import ProducerIdManager
from onceflow.log.durable_file import temp_path, write_atomically
from onceflow.log.index import OffsetIndex
from onceflow.log.producer_snapshot import write_snapshot


@pytest.fixture
def fsynced(monkeypatch):
    """The kind of every descriptor fsynced ("file" or "dir"), in order."""
    seen: list[str] = []
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        seen.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return seen


def test_replaces_the_file_and_leaves_no_temp_file(tmp_path, fsynced):
    path = tmp_path / "state"
    write_atomically(path, "one")
    write_atomically(path, b"two")
    assert path.read_bytes() == b"two"
    assert not temp_path(path).exists()
    assert fsynced == ["file", "dir", "file", "dir"]


def test_not_durable_skips_both_fsyncs(tmp_path, fsynced):
    write_atomically(tmp_path / "checkpoint", "5\n", durable=False)
    assert (tmp_path / "checkpoint").read_text() == "5\n"
    assert fsynced == []


def test_a_durable_index_write_fsyncs_its_directory(tmp_path, fsynced):
    """An index written at flush survives a power cut: the rename is made durable too (the index used
    to fsync the file but not the directory)."""
    index = OffsetIndex(0)
    index.append(10, 0)
    index.write(tmp_path / "00000000000000000000.index", fsync=True)
    assert fsynced == ["file", "dir"]
    fsynced.clear()
    index.write(tmp_path / "00000000000000000000.index", fsync=False)  # at roll: a later flush fsyncs
    assert fsynced == []


def test_every_hand_written_place_now_goes_through_it(tmp_path, fsynced):
    write_snapshot(tmp_path, 42, [])
    assert fsynced == ["file", "dir"]
    fsynced.clear()
    ProducerIdManager(tmp_path, block_size=10).generate_producer_id()
    assert fsynced == ["file", "dir"]
    fsynced.clear()
    topics = TopicManager(tmp_path / "data")
    topics.load()  # writes meta.properties
    assert fsynced == ["file", "dir"]
    topics.close()
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_secret_is_never_readable_by_others_not_even_through_a_leftover_temp(tmp_path, monkeypatch):
    path = tmp_path / "secrets.json"
    temp = temp_path(path)
    temp.write_text("a leftover of a crash")
    temp.chmod(0o644)
    modes: list[int] = []
    real_write = os.write

    def recording_write(fd: int, data) -> int:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    write_atomically(path, "password", mode=0o600)
    assert modes and all(mode == 0o600 for mode in modes)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "password"
