"""Quick smoke tests: real clients produce to and consume from an in-process broker.

The broker runs on its own event loop in a thread, since these clients are synchronous. The deep
interop suites live in tests/interop; this only proves the broker's versions and answers suit them.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from .raw_client import running_broker


class ThreadedBroker:
    def __init__(self, data_dir, **config) -> None:
        self._started = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, args=(data_dir, config), daemon=True)
        self.port = 0
        self.broker = None

    def _run(self, data_dir, config) -> None:
        async def main():
            self._stop = asyncio.Event()
            async with running_broker(data_dir, **config) as broker:
                self.broker = broker
                self.port = broker.port
                self._started.set()
                await self._stop.wait()

        self._loop.run_until_complete(main())

    def __enter__(self) -> ThreadedBroker:
        self._thread.start()
        assert self._started.wait(30), "broker did not start"
        return self

    def __exit__(self, *exc_info) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, fn):
        """Run ``fn()`` on the broker's event loop thread and return its result (the broker's objects
        belong to that thread)."""

        async def run():
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with ThreadedBroker(tmp_path_factory.mktemp("smoke"), num_partitions=2) as running:
        yield running


def test_kafka_python_producer_and_consumer(broker):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=False)
    for i in range(20):
        producer.send("kp-smoke", key=b"k%d" % (i % 3), value=b"v%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        "kp-smoke",
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    values = []
    for _ in range(100):
        if len(values) >= 20:
            break
        for messages in consumer.poll(timeout_ms=200).values():
            values += [m.value for m in messages]
    consumer.close()
    values.sort()
    assert values == sorted(b"v%d" % i for i in range(20))


def test_confluent_kafka_producer_and_consumer(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": False})
    delivered = []
    for i in range(50):
        producer.produce("ck-smoke", value=b"v%d" % i, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 50
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    partitions = [TopicPartition("ck-smoke", p, 0) for p in range(2)]
    consumer.assign(partitions)
    values = []
    for _ in range(200):
        if len(values) == 50:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(50))


def test_aiokafka_producer_and_consumer(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("aio-smoke", b"v%d" % i, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition("aio-smoke", 0)])
            values = []
            while len(values) < 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                values += [m.value for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(scenario()) == [b"v%d" % i for i in range(10)]
