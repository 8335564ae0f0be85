"""Clients made before their broker is up (services started together): Kafka's constructors never
connect. Our consumer polls nothing until a bootstrap server answers; our producer's start waits for
one up to max.block.ms (and then fails saying so). Both used to fail at once with "Connection refused"."""

from __future__ import annotations

import threading
import time

import pytest
from tests.helpers.broker import BrokerProcess, free_port

from onceflow.client import Consumer, Producer, SimpleClient
from onceflow.client.connection import BrokerConnectionError


@pytest.fixture
def late_broker(tmp_path):
    """A free port now, and a function that starts a broker on it after ``delay`` seconds."""
    port = free_port()
    started: list[BrokerProcess] = []

    def start_after(delay: float) -> threading.Thread:
        def run() -> None:
            time.sleep(delay)
            broker = BrokerProcess(tmp_path / "data", port=port)
            broker.start()
            started.append(broker)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    yield port, start_after
    for broker in started:
        broker.stop()


def test_a_consumer_made_before_its_broker_reads_once_the_broker_is_up(late_broker):
    port, start_after = late_broker
    bootstrap = f"127.0.0.1:{port}"
    settings = {"bootstrap.servers": bootstrap, "group.id": "late", "auto.offset.reset": "earliest"}
    consumer = Consumer("late", config=settings)
    try:
        assert consumer.poll(500) == []  # nobody listens yet: nothing, no error
        start_after(0).join()
        with SimpleClient(bootstrap) as client:
            client.create_topic("late", partitions=1)
            client.produce("late", [(b"k", b"one"), (b"k", b"two")])
        read: list = []
        deadline = time.monotonic() + 60
        while len(read) < 2 and time.monotonic() < deadline:
            read += consumer.poll(500)
        assert [r.value for r in read] == [b"one", b"two"]
    finally:
        consumer.close()


def test_a_producer_waits_for_its_broker_up_to_max_block_ms(late_broker):
    port, start_after = late_broker
    bootstrap = f"127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(BrokerConnectionError, match="max.block.ms=1000"):
        Producer({"bootstrap.servers": bootstrap, "max.block.ms": 1000})
    assert time.monotonic() - started >= 0.9
    starting = start_after(1.0)
    with Producer({"bootstrap.servers": bootstrap, "max.block.ms": 30000}) as producer:
        metadata = producer.send("made-late", b"v").get(30)
    starting.join()
    assert metadata.offset == 0
