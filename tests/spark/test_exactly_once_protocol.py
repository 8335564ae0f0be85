"""The sink task's exactly-once protocol against an in-memory model of Kafka transactions.

The model keeps what the protocol relies on: ``init`` bumps the epoch of a transactional id (fencing
older writers and dropping their open transaction), records and the markers (one per topic written)
become visible together at commit, and a fenced writer's commit fails.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.spark.exactly_once import (
    OutputRecord,
    decode_marker,
    encode_marker,
    transactional_id_for,
    write_exactly_once,
)


class Fenced(Exception):
    pass


class Crash(Exception):
    pass


class ModelCluster:
    def __init__(self) -> None:
        self.committed: list[OutputRecord] = []  # what read_committed consumers see
        self.epochs: dict[str, int] = {}
        self.markers: dict[tuple[str, str], str] = {}  # (transactional id, topic) -> marker


class ModelWriter:
    def __init__(self, cluster: ModelCluster, transactional_id: str, *, crash_after: int | None = None):
        self.cluster = cluster
        self.tid = transactional_id
        self.crash_after = crash_after
        self.epoch = -1
        self.pending: list[OutputRecord] = []
        self.pending_markers: dict[str, str] = {}
        self.aborted = 0

    def _check_epoch(self) -> None:
        if self.cluster.epochs[self.tid] != self.epoch:
            raise Fenced(self.tid)

    def init(self) -> None:
        self.epoch = self.cluster.epochs.get(self.tid, -1) + 1
        self.cluster.epochs[self.tid] = self.epoch

    def fetch_marker(self, topic: str) -> int | None:
        return decode_marker(self.cluster.markers.get((self.tid, topic)))

    def begin(self) -> None:
        self._check_epoch()
        self.pending, self.pending_markers = [], {}

    def send(self, record: OutputRecord) -> None:
        self._check_epoch()
        if self.crash_after is not None and len(self.pending) >= self.crash_after:
            raise Crash("task died mid-batch")
        self.pending.append(record)

    def send_offsets(self, batch_id: int, topics) -> None:
        self.pending_markers = {topic: encode_marker(batch_id) for topic in topics}

    def commit(self) -> None:
        self._check_epoch()
        self.cluster.committed.extend(self.pending)
        for topic, marker in self.pending_markers.items():
            self.cluster.markers[(self.tid, topic)] = marker
        self.pending = []

    def abort(self) -> None:
        self.aborted += 1
        self.pending = []

    def close(self) -> None:
        pass


def batch_records(batch: int, n: int = 5) -> list[OutputRecord]:
    return [OutputRecord("out", f"k{i}".encode(), f"b{batch}-{i}".encode()) for i in range(n)]


TID = transactional_id_for("sink", 0)


def test_marker_codec():
    assert decode_marker(encode_marker(7, topic="in", offset=12)) == 7
    assert decode_marker(None) is None
    assert decode_marker("") is None
    assert decode_marker("someone else's metadata") is None
    assert decode_marker('{"batch": "x"}') is None
    assert TID == "sink-0"


def test_replayed_batch_writes_nothing_and_next_batch_writes():
    cluster = ModelCluster()
    first = write_exactly_once(ModelWriter(cluster, TID), 0, batch_records(0))
    assert (first.records, first.skipped) == (5, False)
    # The driver died after Kafka committed batch 0 but before Spark's commit log: batch 0 again.
    replay = write_exactly_once(ModelWriter(cluster, TID), 0, batch_records(0))
    assert replay.skipped and replay.records == 0
    write_exactly_once(ModelWriter(cluster, TID), 1, batch_records(1))
    assert cluster.committed == batch_records(0) + batch_records(1)


def test_task_failure_mid_batch_leaves_nothing_and_the_retry_writes_once():
    cluster = ModelCluster()
    crashing = ModelWriter(cluster, TID, crash_after=3)
    with pytest.raises(Crash):
        write_exactly_once(crashing, 0, batch_records(0))
    assert cluster.committed == [] and crashing.aborted == 1
    write_exactly_once(ModelWriter(cluster, TID), 0, batch_records(0))
    assert cluster.committed == batch_records(0)


def test_zombie_attempt_is_fenced_by_the_next_attempt():
    cluster = ModelCluster()
    zombie = ModelWriter(cluster, TID)
    zombie.init()
    zombie.begin()
    for record in batch_records(0):
        zombie.send(record)
    # A speculative copy (or a retry after a lost executor) runs the same task to the end.
    write_exactly_once(ModelWriter(cluster, TID), 0, batch_records(0))
    with pytest.raises(Fenced):
        zombie.commit()
    assert cluster.committed == batch_records(0)


def test_tasks_of_one_batch_have_independent_markers():
    cluster = ModelCluster()
    write_exactly_once(ModelWriter(cluster, transactional_id_for("sink", 0)), 0, batch_records(0, 2))
    # Task 1 of batch 0 failed before writing; on replay task 0 skips and task 1 writes.
    outcomes = [
        write_exactly_once(ModelWriter(cluster, transactional_id_for("sink", p)), 0, batch_records(0, 2))
        for p in (0, 1)
    ]
    assert [o.skipped for o in outcomes] == [True, False]
    assert len(cluster.committed) == 4


def test_a_task_with_no_rows_commits_no_marker_and_later_batches_still_write_once():
    """An empty task has no topic to put a marker on, and its replay writes nothing either."""
    cluster = ModelCluster()
    writer = ModelWriter(cluster, TID)
    empty = write_exactly_once(writer, 0, [])
    assert (empty.records, empty.skipped, empty.prepared) == (0, False, "")
    assert writer.pending_markers == {} and cluster.markers == {}
    write_exactly_once(ModelWriter(cluster, TID), 1, batch_records(1))
    write_exactly_once(ModelWriter(cluster, TID), 1, batch_records(1))  # its replay
    assert write_exactly_once(ModelWriter(cluster, TID), 0, []).records == 0  # an empty replay of 0
    assert cluster.committed == batch_records(1)


def routed(batch: int, topics: tuple[str, ...], n: int = 6) -> list[OutputRecord]:
    """Records of one batch that name their topics (a per-row ``topic`` column)."""
    return [OutputRecord(topics[i % len(topics)], None, f"b{batch}-{i}".encode()) for i in range(n)]


def test_rows_choosing_their_topics_are_written_once_whatever_the_replay_order():
    """The marker goes on every topic written: the replay finds it on its first record's topic, which
    is one of them even when a shuffle delivered the rows in another order."""
    cluster = ModelCluster()
    batch0 = routed(0, ("a", "b"))
    write_exactly_once(ModelWriter(cluster, TID), 0, batch0)
    replay = write_exactly_once(ModelWriter(cluster, TID), 0, list(reversed(batch0)))
    assert replay.skipped
    # Batch 1 writes only to "a"; batch 2 starts with "b", whose marker still says batch 0: written.
    write_exactly_once(ModelWriter(cluster, TID), 1, routed(1, ("a",)))
    assert write_exactly_once(ModelWriter(cluster, TID), 1, routed(1, ("a",))).skipped
    assert not write_exactly_once(ModelWriter(cluster, TID), 2, routed(2, ("b", "c"))).skipped
    assert sorted(cluster.committed) == sorted(batch0 + routed(1, ("a",)) + routed(2, ("b", "c")))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_run_of_batches_crashes_and_shuffled_replays_writes_each_batch_once(data):
    """Batches of one task with random topic sets; each may be cut short by a task crash (retried),
    and once committed may be replayed any number of times in any row order (driver crashes between
    the Kafka commit and Spark's commit log). The output holds every batch once."""
    topics = ("a", "b", "c", "d")
    cluster = ModelCluster()
    expected: list[OutputRecord] = []
    for batch in range(data.draw(st.integers(1, 6))):
        chosen = tuple(data.draw(st.sets(st.sampled_from(topics), min_size=1)))
        records = routed(batch, chosen, data.draw(st.integers(1, 8)))
        crashes = data.draw(st.integers(0, 2))
        for _ in range(crashes):
            crash_after = data.draw(st.integers(0, len(records) - 1))
            with pytest.raises(Crash):
                write_exactly_once(ModelWriter(cluster, TID, crash_after=crash_after), batch, records)
        write_exactly_once(ModelWriter(cluster, TID), batch, records)
        expected += records
        for _ in range(data.draw(st.integers(0, 2))):
            shuffled = list(records)
            random.Random(data.draw(st.integers(0, 1000))).shuffle(shuffled)
            assert write_exactly_once(ModelWriter(cluster, TID), batch, shuffled).skipped
    assert sorted(cluster.committed) == sorted(expected)
