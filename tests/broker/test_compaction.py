"""Compacted topics on the broker: the internal topics are compacted (so retention never drops a group's
committed offsets), the log cleaner runs on them and on users' topics, and a compacted topic refuses
records without a key."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from onceflow.broker.topics import INTERNAL_TOPIC_CONFIGS
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.log import cleaner
from onceflow.protocol.errors import InvalidConfig
from onceflow.protocol.record_codec import split_batches

from .raw_client import running_broker

DAY_MS = 86_400_000


def _commit(port: int, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _committed(port: int, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition("t", 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def _offsets_partitions_with_data(broker):
    topic = broker.topics.get("__consumer_offsets")
    return [p for p in topic.partitions if p.log.log_end_offset > 0]


def test_committed_offsets_outlive_retention_ms(tmp_path):
    """A quiet group's offsets used to sit in a __consumer_offsets segment that retention.ms (7 days)
    deleted; the next restart forgot them. The internal topics are compacted now: no retention."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 1)
            await asyncio.to_thread(_commit, broker.port, "quiet", 42)
            configs = broker.topics.get("__consumer_offsets").configs
            assert configs["cleanup.policy"] == "compact"
            for partition in _offsets_partitions_with_data(broker):
                partition.log.roll()
            # A month later, retention runs; the group has committed nothing since.
            assert broker.topics.apply_retention(int(time.time() * 1000) + 30 * DAY_MS) == 0
        async with running_broker(tmp_path) as restarted:
            assert await asyncio.to_thread(_committed, restarted.port, "quiet") == 42

    asyncio.run(scenario())


def test_data_dirs_of_older_versions_get_compacted_internal_topics(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, single_node_files=True) as broker:
            broker.topics.create_topic("t", 1)
            await asyncio.to_thread(_commit, broker.port, "g", 7)
        path = tmp_path / "topics.json"
        doc = json.loads(path.read_text())
        for topic in doc["topics"]:
            if topic["name"] == "__consumer_offsets":
                topic["configs"] = {}  # what an onceflow without compaction wrote
        path.write_text(json.dumps(doc))
        async with running_broker(tmp_path) as restarted:
            topic = restarted.topics.get("__consumer_offsets")
            assert topic.configs == INTERNAL_TOPIC_CONFIGS
            assert all(p.log.config.compact and not p.log.config.delete for p in topic.partitions)
            assert await asyncio.to_thread(_committed, restarted.port, "g") == 7
        async with running_broker(tmp_path) as again:  # kept
            assert again.topics.get("__consumer_offsets").configs == INTERNAL_TOPIC_CONFIGS

    asyncio.run(scenario())


def test_the_cleaner_compacts_consumer_offsets_and_a_restart_reads_them_back(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, log_cleaner_backoff_ms=50) as broker:
            broker.topics.create_topic("t", 1)
            for offset in range(1, 31):
                await asyncio.to_thread(_commit, broker.port, "busy", offset)
            [partition] = _offsets_partitions_with_data(broker)
            before = partition.log.size_in_bytes
            partition.log.roll()
            deadline = time.monotonic() + 20
            while partition.log.size_in_bytes > before // 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert partition.log.size_in_bytes <= before // 2, (before, partition.log.size_in_bytes)
        async with running_broker(tmp_path) as restarted:
            assert await asyncio.to_thread(_committed, restarted.port, "busy") == 30

    asyncio.run(scenario())


def _produce(port: int, topic: str, records: list[tuple[bytes | None, bytes]]) -> list[str]:
    errors: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err.name())

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.flush(10)  # one batch each: segments roll at their size
    assert producer.flush(10) == 0
    return errors


def _read_all(port: int, topic: str, end: int, timestamps: bool = False) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                if consumer.position([TopicPartition(topic, 0)])[0].offset >= end:
                    break
                continue
            out.append(
                (message.offset(), message.key(), message.value(), message.timestamp()[1])[: 3 + timestamps]
            )
            if message.offset() >= end - 1:
                break
    finally:
        consumer.close()
    return out


async def _read_all_with_onceflow(port: int, topic: str, end: int, timestamps: bool = False) -> list[tuple]:
    out: list[tuple] = []
    async with AsyncConsumer(
        bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TP(topic, 0)])
        deadline = time.monotonic() + 20
        while await consumer.position(TP(topic, 0)) < end and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend((r.offset, r.key, r.value, r.timestamp)[: 3 + timestamps] for r in records)
    return out


def _read_all_with_kafka_python(port: int, topic: str, end: int, timestamps: bool = False) -> list[tuple]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTP

    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False, auto_offset_reset="earliest"
    )
    consumer.assign([KafkaTP(topic, 0)])
    out: list[tuple] = []
    deadline = time.monotonic() + 20
    try:
        while consumer.position(KafkaTP(topic, 0)) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend((r.offset, r.key, r.value, r.timestamp)[: 3 + timestamps] for r in records)
    finally:
        consumer.close()
    return out


def test_a_users_compacted_topic_is_read_without_the_replaced_records(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, log_cleaner_backoff_ms=50) as broker:
            broker.topics.create_topic(
                "table",
                1,
                {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"},
            )
            writes = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(40)]
            assert await asyncio.to_thread(_produce, broker.port, "table", writes) == []
            log = broker.topics.get_partition("table", 0).log
            deadline = time.monotonic() + 20
            # Until the cleaner has run and has nothing more to do: then the reads below see one log.
            while time.monotonic() < deadline and (
                broker._log_cleaner.cleanings == 0 or cleaner.plan(log, int(time.time() * 1000)) is not None
            ):
                await asyncio.sleep(0.05)
            assert broker._log_cleaner.cleanings > 0
            read = await asyncio.to_thread(_read_all, broker.port, "table", log.log_end_offset)
            # librdkafka crosses the gaps; every record it sees is still at its own offset.
            assert all(writes[offset] == (key, value) for offset, key, value in read)
            assert len(read) < len(writes)
            latest = {key: value for _, key, value in read}
            assert latest == {b"k%d" % k: b"v%d" % (35 + k) for k in range(5)}
            assert await _read_all_with_onceflow(broker.port, "table", log.log_end_offset) == read
            end = log.log_end_offset
            assert await asyncio.to_thread(_read_all_with_kafka_python, broker.port, "table", end) == read
            refused = await asyncio.to_thread(_produce, broker.port, "table", [(None, b"no key")])
            assert refused == ["INVALID_RECORD"]

    asyncio.run(scenario())


def test_an_unknown_cleanup_policy_is_refused(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            with pytest.raises(InvalidConfig, match="cleanup.policy"):
                broker.topics.create_topic("x", 1, {"cleanup.policy": "compress"})
            assert broker.topics.get("x") is None

    asyncio.run(scenario())


class _DeadWorker:
    def submit(self, *args, **kwargs):
        from concurrent.futures.process import BrokenProcessPool

        raise BrokenProcessPool("the worker died")

    def shutdown(self, **kwargs):
        pass


def _compacted_log_due_for_cleaning(broker):
    broker.topics.create_topic("kv", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})
    log = broker.topics.get_partition("kv", 0).log
    from tests.log.test_log_cleaner import append, keyed

    append(log, keyed([(b"k", b"1"), (b"k", b"2")]))
    log.roll()
    # Written past the partition's replica: committed by hand (the cleaner stays below the HW).
    log.update_high_watermark(log.log_end_offset)
    return log


def test_a_dead_cleaner_worker_is_replaced_and_no_process_means_a_thread(tmp_path, monkeypatch):
    from onceflow.broker import log_cleaner

    async def scenario():
        async with running_broker(tmp_path, log_cleaner_enable=False) as broker:
            log = _compacted_log_due_for_cleaning(broker)
            lc = log_cleaner.LogCleaner(broker.topics, backoff_ms=1000)
            lc._executor = _DeadWorker()
            assert await lc.clean_once() == 0 and lc._executor is None  # dropped, the log untouched
            assert log.size_in_bytes > 0 and cleaner.plan(log, int(time.time() * 1000)) is not None

            def no_processes(*args, **kwargs):
                raise OSError("no processes here")

            monkeypatch.setattr(log_cleaner, "ProcessPoolExecutor", no_processes)
            assert await lc.clean_once() == 1  # on a thread
            assert type(lc._executor).__name__ == "ThreadPoolExecutor"
            lc.close()
            assert cleaner.plan(log, int(time.time() * 1000)) is None

    asyncio.run(scenario())


async def _read_all_with_aiokafka(port: int, topic: str, end: int, timestamps: bool = False) -> list[tuple]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTP

    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    out: list[tuple] = []
    try:
        consumer.assign([AioTP(topic, 0)])
        deadline = time.monotonic() + 20
        while await consumer.position(AioTP(topic, 0)) < end and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend((r.offset, r.key, r.value, r.timestamp)[: 3 + timestamps] for r in records)
    finally:
        await consumer.stop()
    return out


def _produce_idempotent(port: int, topic: str, key: bytes, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True})
    producer.produce(topic, key=key, value=value)
    assert producer.flush(10) == 0


def test_every_client_reads_past_an_emptied_producer_batch(tmp_path):
    """A producer's last batch stays, empty, when newer records replace all of it (its sequence state):
    librdkafka, aiokafka, kafka-python and our consumer all go on past it."""

    async def scenario():
        async with running_broker(tmp_path, log_cleaner_backoff_ms=50) as broker:
            broker.topics.create_topic(
                "emptied", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}
            )
            log = broker.topics.get_partition("emptied", 0).log
            await asyncio.to_thread(_produce_idempotent, broker.port, "emptied", b"k", b"first")  # 0
            await asyncio.to_thread(_produce_idempotent, broker.port, "emptied", b"k", b"second")  # 1
            assert await asyncio.to_thread(_produce, broker.port, "emptied", [(b"j", b"x")]) == []  # 2
            log.roll()
            assert await asyncio.to_thread(_produce, broker.port, "emptied", [(b"z", b"tail")]) == []  # 3
            deadline = time.monotonic() + 20
            while broker._log_cleaner.cleanings == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            first = split_batches(log.read(0, 1 << 20))
            header, _ = next(iter(first))
            assert (header.base_offset, header.record_count) == (0, 0)  # the first producer's, emptied
            expected = [(1, b"k", b"second"), (2, b"j", b"x"), (3, b"z", b"tail")]
            assert await asyncio.to_thread(_read_all, broker.port, "emptied", 4) == expected
            assert await _read_all_with_aiokafka(broker.port, "emptied", 4) == expected
            assert await asyncio.to_thread(_read_all_with_kafka_python, broker.port, "emptied", 4) == expected
            assert await _read_all_with_onceflow(broker.port, "emptied", 4) == expected

    asyncio.run(scenario())


def _produce_at(port: int, topic: str, records: list[tuple[bytes, bytes | None, int]]) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0})
    for key, value, timestamp in records:
        producer.produce(topic, key=key, value=value, timestamp=timestamp)
        producer.flush(10)  # one batch each
    assert producer.flush(10) == 0


def test_a_delete_with_an_old_timestamp_outlives_compaction_and_every_client_reads_its_horizon_batch(
    tmp_path,
):
    """KIP-534: a tombstone produced with a timestamp older than delete.retention.ms (a replay) stays
    after the cleaning that finds it, which gives its batch a delete horizon (the base timestamp becomes
    the horizon; the records keep their timestamps as deltas from it). librdkafka, aiokafka,
    kafka-python and our consumer all read the delete and each record's own timestamp."""
    old = int(time.time() * 1000) - 30 * DAY_MS

    async def scenario():
        async with running_broker(tmp_path, log_cleaner_backoff_ms=50) as broker:
            broker.topics.create_topic(
                "replay", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}
            )
            log = broker.topics.get_partition("replay", 0).log
            started = int(time.time() * 1000)
            writes = [(b"k", b"v", old), (b"k", None, old + 1), (b"j", b"x", old + 2)]
            await asyncio.to_thread(_produce_at, broker.port, "replay", writes)  # 0, 1, 2
            log.roll()
            await asyncio.to_thread(_produce_at, broker.port, "replay", [(b"z", b"tail", old + 3)])  # 3
            deadline = time.monotonic() + 20
            while broker._log_cleaner.cleanings == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            headers = [header for header, _ in split_batches(log.read(0, 1 << 20))]
            assert [h.base_offset for h in headers] == [1, 2]  # the cleaned segment
            assert headers[0].delete_horizon_ms is not None
            # The cleaning's time plus delete.retention.ms (1 day by default), not the record's time.
            assert started + DAY_MS <= headers[0].delete_horizon_ms <= int(time.time() * 1000) + DAY_MS
            expected = [(1, b"k", None, old + 1), (2, b"j", b"x", old + 2), (3, b"z", b"tail", old + 3)]
            assert await asyncio.to_thread(_read_all, broker.port, "replay", 4, True) == expected
            assert await _read_all_with_aiokafka(broker.port, "replay", 4, True) == expected
            assert (
                await asyncio.to_thread(_read_all_with_kafka_python, broker.port, "replay", 4, True)
                == expected
            )
            assert await _read_all_with_onceflow(broker.port, "replay", 4, True) == expected

    asyncio.run(scenario())
