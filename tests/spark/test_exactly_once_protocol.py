"""The sink task's exactly-once protocol against an in-memory model of Kafka transactions.

The model keeps what the protocol relies on: ``init`` bumps the epoch of a transactional id (fencing
older writers and dropping their open transaction), records and the marker become visible together
at commit, and a fenced writer's commit fails.
"""

from __future__ import annotations

import pytest

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
        self.markers: dict[str, str] = {}


class ModelWriter:
    def __init__(self, cluster: ModelCluster, transactional_id: str, *, crash_after: int | None = None):
        self.cluster = cluster
        self.tid = transactional_id
        self.crash_after = crash_after
        self.epoch = -1
        self.pending: list[OutputRecord] = []
        self.pending_marker: str | None = None
        self.aborted = 0

    def _check_epoch(self) -> None:
        if self.cluster.epochs[self.tid] != self.epoch:
            raise Fenced(self.tid)

    def init(self) -> None:
        self.epoch = self.cluster.epochs.get(self.tid, -1) + 1
        self.cluster.epochs[self.tid] = self.epoch

    def fetch_marker(self) -> int | None:
        return decode_marker(self.cluster.markers.get(self.tid))

    def begin(self) -> None:
        self._check_epoch()
        self.pending, self.pending_marker = [], None

    def send(self, record: OutputRecord) -> None:
        self._check_epoch()
        if self.crash_after is not None and len(self.pending) >= self.crash_after:
            raise Crash("task died mid-batch")
        self.pending.append(record)

    def send_offsets(self, batch_id: int) -> None:
        self.pending_marker = encode_marker(batch_id)

    def commit(self) -> None:
        self._check_epoch()
        self.cluster.committed.extend(self.pending)
        if self.pending_marker is not None:
            self.cluster.markers[self.tid] = self.pending_marker
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
    """The marker is an offset commit naming the output topic, which may not exist before a record
    creates it (a pipeline's first batches can be empty): an empty task commits no marker."""
    cluster = ModelCluster()
    writer = ModelWriter(cluster, TID)
    assert write_exactly_once(writer, 0, []) == (0, False)
    assert writer.pending_marker is None and cluster.markers == {}
    write_exactly_once(ModelWriter(cluster, TID), 1, batch_records(1))
    write_exactly_once(ModelWriter(cluster, TID), 1, batch_records(1))  # its replay
    assert write_exactly_once(ModelWriter(cluster, TID), 0, []).records == 0  # an empty replay of 0
    assert cluster.committed == batch_records(1)
