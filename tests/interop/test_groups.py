"""Consumer groups with real clients: confluent-kafka, kafka-python and aiokafka in one group.

Each member runs in its own process (tests/group/interop_worker.py) so it can be kill -9'ed. After
every membership change we wait until each of the 6 partitions is owned by exactly one live member,
and at the end every produced record has been processed by someone (commits follow processing, so a
record may be seen twice after a crash but never skipped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.interop

PARTITIONS = 6
WORKER = Path(__file__).resolve().parents[1] / "group" / "interop_worker.py"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """Our own broker: no initial rebalance delay, so the test waits on the protocol, not a timer."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("groups"), extra_args=["--config", "group.initial.rebalance.delay.ms=0"]
    )
    proc.start()
    yield proc
    proc.stop()


class Member:
    """One worker process and what it reported."""

    def __init__(
        self, client: str, bootstrap: str, topic: str, group: str, strategy: str = "range,roundrobin"
    ):
        self.client = client
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), client, bootstrap, topic, group, strategy],
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("GROUP_WORKER_STDERR") else subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            start_new_session=True,
        )
        self.assigned: list[int] = []
        self.records: set[tuple[int, int]] = set()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if "assigned" in msg:
                    self.assigned = msg["assigned"]
                for p, o in msg.get("records", []):
                    self.records.add((p, o))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def leave(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def owned_exactly_once(members: list[Member]) -> bool:
    live = [m for m in members if m.alive]
    owned = [p for m in live for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS))


def produce(bootstrap: str, topic: str, per_partition: int, produced: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(PARTITIONS):
        for _ in range(per_partition):
            p.produce(topic, value=b"x", partition=part)
        produced[part] = produced.get(part, 0) + per_partition
    assert p.flush(30) == 0


def all_seen(members: list[Member], produced: dict[int, int]) -> bool:
    seen = set().union(*(m.records for m in members))
    return all((p, o) in seen for p, n in produced.items() for o in range(n))


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)


def test_three_clients_share_partitions_through_join_leave_and_kill9(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = topic_name("grp"), topic_name("g")
    create_topic(bootstrap, topic)
    produced: dict[int, int] = {}
    produce(bootstrap, topic, 20, produced)
    members = [Member(c, bootstrap, topic, group) for c in ("confluent", "kafka-python", "aiokafka")]
    try:
        wait_for(lambda: owned_exactly_once(members) and all(m.assigned for m in members), 60, "3-way split")
        wait_for(lambda: all_seen(members, produced), 30, "first records")

        members[1].leave()  # kafka-python leaves cleanly
        produce(bootstrap, topic, 10, produced)
        wait_for(lambda: owned_exactly_once(members), 60, "2-way split after leave")
        wait_for(lambda: all_seen(members, produced), 30, "records after leave")

        members.append(Member("kafka-python", bootstrap, topic, group))  # a new member joins
        wait_for(lambda: owned_exactly_once(members) and members[-1].assigned, 60, "split after join")
        produce(bootstrap, topic, 10, produced)
        wait_for(lambda: all_seen(members, produced), 30, "records after join")

        members[2].kill9()  # aiokafka dies without leaving: its session must time out
        produce(bootstrap, topic, 10, produced)
        wait_for(lambda: owned_exactly_once(members), 60, "split after kill -9")
        wait_for(lambda: all_seen(members, produced), 30, "records after kill -9")

        for m in members:
            if m.alive:
                m.leave()
        assert committed(bootstrap, group, topic) == produced
    finally:
        for m in members:
            m.close()


def test_cooperative_sticky(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = topic_name("coop"), topic_name("g")
    create_topic(bootstrap, topic)
    produced: dict[int, int] = {}
    produce(bootstrap, topic, 10, produced)
    members = [Member("confluent", bootstrap, topic, group, "cooperative-sticky") for _ in range(2)]
    try:
        wait_for(lambda: owned_exactly_once(members) and all(m.assigned for m in members), 60, "2-way split")
        before = {id(m): set(m.assigned) for m in members}
        members.append(Member("confluent", bootstrap, topic, group, "cooperative-sticky"))
        wait_for(lambda: owned_exactly_once(members) and members[-1].assigned, 60, "3-way split")
        # sticky: the first two only gave partitions away, they took none from each other
        for m in members[:2]:
            assert set(m.assigned) <= before[id(m)]
        members[0].leave()
        produce(bootstrap, topic, 10, produced)
        wait_for(lambda: owned_exactly_once(members), 60, "split after leave")
        wait_for(lambda: all_seen(members, produced), 30, "all records")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(15)
        assert desc.partition_assignor == "cooperative-sticky"
    finally:
        for m in members:
            m.close()


def test_committed_offsets_survive_broker_kill9(tmp_path):
    proc = BrokerProcess(tmp_path / "data", extra_args=["--config", "group.initial.rebalance.delay.ms=0"])
    proc.start()
    try:
        bootstrap = proc.bootstrap
        topic, group = topic_name("dur"), topic_name("g")
        create_topic(bootstrap, topic)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        offsets = [TopicPartition(topic, p, 100 + p) for p in range(PARTITIONS)]
        c.commit(offsets=offsets, asynchronous=False)
        c.close()
        proc.kill9()
        proc.restart()
        bootstrap = proc.bootstrap
        assert committed(bootstrap, group, topic) == {p: 100 + p for p in range(PARTITIONS)}
        admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
        groups = admin.list_consumer_groups().result(15)
        assert group in {g.group_id for g in groups.valid}
    finally:
        proc.stop()
