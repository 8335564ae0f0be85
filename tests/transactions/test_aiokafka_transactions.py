"""aiokafka transactional producer and read_committed consumer: commit, abort, multi-partition
atomicity, send_offsets_to_transaction, zombie fencing, timeout abort."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.errors import KafkaError, ProducerFenced  # noqa: E402

ABORT_TIMER_MS = 300


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("txn-aiokafka"),
        extra_args=(
            "--config",
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={ABORT_TIMER_MS}",
        ),
    )
    proc.start()
    yield proc
    proc.stop()


async def create_topic(bootstrap: str, partitions: int = 3) -> str:
    name = topic_name("aio-txn")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
    return name


async def read_all(
    bootstrap: str, topic: str, isolation: str, expected: int | None = None, idle_s: float = 2.0
):
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        enable_auto_commit=False,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            got = [m.value for msgs in batches.values() for m in msgs]
            values += got
            if not got and (expected is None or len(values) >= expected):
                break
    finally:
        await consumer.stop()
    return values


def test_commit_abort_and_multi_partition_atomicity(txn_broker):
    async def scenario():
        b = txn_broker.bootstrap
        topic = await create_topic(b)
        producer = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-commit")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(12):
                    await producer.send(topic, b"kept-%d" % i, partition=i % 3)
            await producer.begin_transaction()
            for i in range(12):
                await producer.send(topic, b"dropped-%d" % i, partition=i % 3)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()
        committed = await read_all(b, topic, "read_committed", expected=12)
        assert sorted(committed) == sorted(b"kept-%d" % i for i in range(12))
        assert len(await read_all(b, topic, "read_uncommitted", expected=24)) == 24

    asyncio.run(scenario())


def test_send_offsets_to_transaction(txn_broker):
    async def scenario():
        b = txn_broker.bootstrap
        source, sink = await create_topic(b, 1), await create_topic(b, 1)
        seed = AIOKafkaProducer(bootstrap_servers=b)
        await seed.start()
        for i in range(4):
            await seed.send_and_wait(source, b"in-%d" % i)
        await seed.stop()
        group = f"aio-copier-{uuid.uuid4().hex[:6]}"
        producer = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-offsets")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send(sink, b"out-%d" % i)
                await producer.send_offsets_to_transaction({TopicPartition(source, 0): 4}, group)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=b, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            assert await consumer.committed(TopicPartition(source, 0)) == 4
        finally:
            await consumer.stop()
        assert sorted(await read_all(b, sink, "read_committed", expected=4)) == [
            b"out-%d" % i for i in range(4)
        ]

    asyncio.run(scenario())


def test_zombie_is_fenced_by_a_new_instance(txn_broker):
    async def scenario():
        b = txn_broker.bootstrap
        topic = await create_topic(b, 1)
        zombie = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-zombie")
        await zombie.start()
        fresh = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-zombie")
        try:
            await zombie.begin_transaction()
            await zombie.send_and_wait(topic, b"zombie")
            await fresh.start()  # aborts the zombie's transaction and bumps the epoch
            with pytest.raises((ProducerFenced, KafkaError)):
                await zombie.send_and_wait(topic, b"zombie-2")
                await zombie.commit_transaction()
            async with fresh.transaction():
                await fresh.send_and_wait(topic, b"fresh")
        finally:
            await fresh.stop()
            await zombie.stop()
        assert await read_all(b, topic, "read_committed", expected=1) == [b"fresh"]

    asyncio.run(scenario())


def test_timeout_aborts_and_fences_the_late_producer(txn_broker):
    async def scenario():
        b = txn_broker.bootstrap
        topic = await create_topic(b, 1)
        late = AIOKafkaProducer(
            bootstrap_servers=b, transactional_id="aio-timeout", transaction_timeout_ms=1000
        )
        await late.start()
        try:
            await late.begin_transaction()
            await late.send_and_wait(topic, b"too-late")
            await asyncio.sleep(1.0 + 4 * ABORT_TIMER_MS / 1000)
            with pytest.raises(KafkaError):
                await late.commit_transaction()
        finally:
            await late.stop()
        assert await read_all(b, topic, "read_committed", idle_s=1.0) == []
        assert await read_all(b, topic, "read_uncommitted", expected=1) == [b"too-late"]

    asyncio.run(scenario())
