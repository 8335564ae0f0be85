"""Kafka's topic configs beyond retention and compaction, set by real clients: provisioning scripts set
min.insync.replicas or compression.type, which the broker used to refuse as unknown. The ones with an
effect on one broker have it (recompression, NOT_ENOUGH_REPLICAS, INVALID_TIMESTAMP, fsync policy);
replication, tiered-storage and file hints are accepted and described; enabling tiered storage is
refused. A broker config nobody set is described as DEFAULT_CONFIG, one the broker was started with as
STATIC_BROKER_CONFIG."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.record_codec import split_batches

from .raw_client import RawClient, build_batch, running_broker
from .test_produce_fetch import partition_response, produce_request

ACCEPTED = {
    "min.insync.replicas": "1",
    "compression.type": "zstd",
    "compression.zstd.level": "5",
    "unclean.leader.election.enable": "false",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000",
    "flush.messages": "10000",
    "flush.ms": "60000",
    "preallocate": "true",
    "message.downconversion.enable": "false",
    "local.retention.ms": "-2",
    "segment.jitter.ms": "0",
    "file.delete.delay.ms": "60000",
    "leader.replication.throttled.replicas": "",
}


def _admin(port: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})


def _create(port: int, topic: str, config: dict[str, str]) -> str | None:
    admin = _admin(port)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(10)
    except KafkaException as exc:
        return exc.args[0].name()
    return None


def _describe(port: int, kind, name: str) -> dict:
    admin = _admin(port)
    [future] = admin.describe_configs([ConfigResource(kind, name)]).values()
    return future.result(10)


def _produce(port: int, topic: str, values: list[bytes], **config) -> list[str | None]:
    results: list[str | None] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 0, **config})
    for value in values:
        producer.produce(
            topic, value, on_delivery=lambda err, _m: results.append(err.name() if err else None)
        )
    producer.flush(20)
    return results


def _consume(port: int, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "configs-reader"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                out.append(message.value())
    finally:
        consumer.close()
    return out


def test_kafkas_topic_configs_are_accepted_and_described(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            assert await asyncio.to_thread(_create, broker.port, "provisioned", ACCEPTED) is None
            described = await asyncio.to_thread(
                _describe, broker.port, ConfigResource.Type.TOPIC, "provisioned"
            )
            for name, value in ACCEPTED.items():
                assert (described[name].value or "") == value, name
                assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            assert described["remote.storage.enable"].value == "false"
            refused = await asyncio.to_thread(
                _create, broker.port, "tiered", {"remote.storage.enable": "true"}
            )
            assert refused == "INVALID_CONFIG"
            bad = await asyncio.to_thread(_create, broker.port, "bad", {"compression.type": "brotli"})
            assert bad == "INVALID_CONFIG"

    asyncio.run(scenario())


def test_compression_type_makes_the_broker_store_the_topics_codec(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            await asyncio.to_thread(_create, broker.port, "packed", {"compression.type": "zstd"})
            values = [b"record %d " % i * 20 for i in range(50)]
            sent = await asyncio.to_thread(
                _produce,
                broker.port,
                "packed",
                values,
                **{"enable.idempotence": True, "compression.type": "gzip"},
            )
            assert sent == [None] * 50
            log = broker.topics.get_partition("packed", 0).log
            headers = [h for h, _ in split_batches(log.read(0, 1 << 20))]
            assert headers and all(h.compression == 4 for h in headers)  # zstd, not the producer's gzip
            assert all(h.producer_id >= 0 for h in headers)  # still the idempotent producer's batches
            assert await asyncio.to_thread(_consume, broker.port, "packed", 50) == values

    asyncio.run(scenario())


def test_min_insync_replicas_is_capped_at_the_replication_factor(tmp_path):
    """Kafka 4's effectiveMinIsr: a partition with one replica takes acks=all under min.insync.replicas
    2 (the refusal when a replicated partition's ISR is too small is in tests/replication)."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            await asyncio.to_thread(_create, broker.port, "safe", {"min.insync.replicas": "2"})
            client = await RawClient.connect(broker.port)
            try:
                answer = await client.request(produce_request("safe", {0: build_batch([b"a"])}, acks=-1), 9)
                assert partition_response(answer).error_code == ErrorCode.NONE
                answer = await client.request(produce_request("safe", {0: build_batch([b"b"])}, acks=1), 9)
                assert partition_response(answer).error_code == ErrorCode.NONE
            finally:
                await client.close()
            assert broker.topics.get_partition("safe", 0).log.log_end_offset == 2

    asyncio.run(scenario())


def test_a_record_stamped_too_far_ahead_is_refused_with_invalid_timestamp(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            await asyncio.to_thread(
                _create, broker.port, "clocked", {"message.timestamp.after.max.ms": "3600000"}
            )
            client = await RawClient.connect(broker.port)
            now = int(time.time() * 1000)
            try:
                ahead = build_batch([b"late"], timestamp_ms=now + 2 * 3_600_000)
                answer = await client.request(produce_request("clocked", {0: ahead}), 9)
                assert partition_response(answer).error_code == ErrorCode.INVALID_TIMESTAMP
                answer = await client.request(
                    produce_request("clocked", {0: build_batch([b"ok"], timestamp_ms=now)}), 9
                )
                assert partition_response(answer).error_code == ErrorCode.NONE
            finally:
                await client.close()

    asyncio.run(scenario())


def test_broker_configs_nobody_set_are_described_as_defaults(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, num_partitions=3) as broker:
            described = await asyncio.to_thread(_describe, broker.port, ConfigResource.Type.BROKER, "0")
            assert described["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
            assert described["num.partitions"].value == "3"
            assert described["auto.create.topics.enable"].source == ConfigSource.DEFAULT_CONFIG.value
            assert described["auto.create.topics.enable"].is_default
            assert described["min.insync.replicas"].source == ConfigSource.DEFAULT_CONFIG.value

    asyncio.run(scenario())
