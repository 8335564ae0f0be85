"""One small adapter per third-party client, so interop tests can be parametrized over clients.

Each adapter offers the same blocking calls: ``produce`` (returns the offsets the broker
acknowledged, in send order), ``consume`` (records from one partition starting at an offset),
and the offset look-ups. Records are compared as plain ``Sent`` / ``Received`` values, with
headers normalised to a tuple of ``(str, bytes)`` pairs (clients disagree on None vs empty).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

CLIENTS = ("confluent", "kafka-python", "aiokafka")
CODECS = ("gzip", "snappy", "lz4", "zstd")
POLL_DEADLINE_S = 30.0


@dataclass(frozen=True)
class Sent:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(frozen=True)
class Received:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    def as_sent(self) -> Sent:
        return Sent(self.key, self.value, self.headers, self.timestamp_ms)


class DeliveryError(RuntimeError):
    """The broker refused a record; ``code`` is the client's view of Kafka's error."""

    def __init__(self, message: str, code: object = None):
        super().__init__(message)
        self.code = code


def _norm_headers(headers) -> tuple[tuple[str, bytes], ...]:
    if not headers:
        return ()
    return tuple((k if isinstance(k, str) else k.decode(), v) for k, v in headers)


def adapter(name: str, bootstrap: str):
    return {"confluent": ConfluentClient, "kafka-python": KafkaPythonClient, "aiokafka": AIOKafkaClient}[
        name
    ](bootstrap)


# ---------------------------------------------------------------------------------------------------
class ConfluentClient:
    name = "confluent"

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def _consumer(self, **extra):
        from confluent_kafka import Consumer

        conf = {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"tests-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        conf.update(extra)
        return Consumer(conf)

    def produce(self, topic: str, records: Sequence[Sent], compression: str = "none", partition: int = 0):
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "compression.type": compression,
                "acks": "all",
                "linger.ms": 5,
            }
        )
        results: dict[int, object] = {}

        def on_delivery(index: int):
            def callback(err, msg):
                results[index] = err if err is not None else msg.offset()

            return callback

        for i, rec in enumerate(records):
            producer.produce(
                topic,
                value=rec.value,
                key=rec.key,
                partition=partition,
                timestamp=rec.timestamp_ms,
                headers=list(rec.headers) or None,
                on_delivery=on_delivery(i),
            )
            producer.poll(0)
        remaining = producer.flush(POLL_DEADLINE_S)
        if remaining:
            raise DeliveryError(f"{remaining} records not delivered within {POLL_DEADLINE_S}s")
        return _offsets_or_raise([results[i] for i in range(len(records))])

    def consume(
        self, topic: str, count: int, offset: int = 0, partition: int = 0, deadline_s: float = POLL_DEADLINE_S
    ) -> list[Received]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        try:
            consumer.assign([TopicPartition(topic, partition, offset)])
            out: list[Received] = []
            deadline = time.monotonic() + deadline_s
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    raise DeliveryError(str(msg.error()), msg.error().code())
                out.append(
                    Received(
                        msg.offset(), msg.key(), msg.value(), _norm_headers(msg.headers()), msg.timestamp()[1]
                    )
                )
            return out
        finally:
            consumer.close()

    def earliest_latest(self, topic: str, partition: int = 0) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        finally:
            consumer.close()

    def offset_for_time(self, topic: str, timestamp_ms: int, partition: int = 0) -> int:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        try:
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)], timeout=10)
            if tp.error:
                raise DeliveryError(str(tp.error))
            return tp.offset
        finally:
            consumer.close()


# ---------------------------------------------------------------------------------------------------
class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def _consumer(self):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=30000,
        )

    def produce(self, topic: str, records: Sequence[Sent], compression: str = "none", partition: int = 0):
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            compression_type=None if compression == "none" else compression,
            acks="all",
            linger_ms=5,
            # kafka-python 3 turns idempotence on by default; these suites test plain produce
            # (the idempotent producer has its own tests once the broker has InitProducerId).
            enable_idempotence=False,
        )
        try:
            futures = [
                producer.send(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=partition,
                    timestamp_ms=rec.timestamp_ms,
                    headers=list(rec.headers),
                )
                for rec in records
            ]
            producer.flush(POLL_DEADLINE_S)
            results: list[object] = []
            for fut in futures:
                try:
                    results.append(fut.get(timeout=POLL_DEADLINE_S).offset)
                except Exception as exc:  # the client's KafkaError subclasses
                    results.append(exc)
            return _offsets_or_raise(results)
        finally:
            producer.close(timeout=5)

    def consume(
        self, topic: str, count: int, offset: int = 0, partition: int = 0, deadline_s: float = POLL_DEADLINE_S
    ) -> list[Received]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            out: list[Received] = []
            deadline = time.monotonic() + deadline_s
            while len(out) < count and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=500).values():
                    out.extend(
                        Received(m.offset, m.key, m.value, _norm_headers(m.headers), m.timestamp)
                        for m in batch
                    )
            return out
        finally:
            consumer.close()

    def earliest_latest(self, topic: str, partition: int = 0) -> tuple[int, int]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(topic, partition)
            return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
        finally:
            consumer.close()

    def offset_for_time(self, topic: str, timestamp_ms: int, partition: int = 0) -> int:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(topic, partition)
            found = consumer.offsets_for_times({tp: timestamp_ms})[tp]
            return -1 if found is None else found.offset
        finally:
            consumer.close()


# ---------------------------------------------------------------------------------------------------
class AIOKafkaClient:
    name = "aiokafka"

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def _consumer(self):
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

    def produce(self, topic: str, records: Sequence[Sent], compression: str = "none", partition: int = 0):
        return asyncio.run(self._produce(topic, records, compression, partition))

    async def _produce(self, topic, records, compression, partition):
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            compression_type=None if compression == "none" else compression,
            acks="all",
            linger_ms=5,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=partition,
                    timestamp_ms=rec.timestamp_ms,
                    headers=list(rec.headers),
                )
                for rec in records
            ]
            results = await asyncio.gather(*futures, return_exceptions=True)
            return _offsets_or_raise([r if isinstance(r, BaseException) else r.offset for r in results])
        finally:
            await producer.stop()

    def consume(
        self, topic: str, count: int, offset: int = 0, partition: int = 0, deadline_s: float = POLL_DEADLINE_S
    ) -> list[Received]:
        return asyncio.run(self._consume(topic, count, offset, partition, deadline_s))

    async def _consume(self, topic, count, offset, partition, deadline_s):
        from aiokafka import TopicPartition

        consumer = self._consumer()
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            out: list[Received] = []
            deadline = time.monotonic() + deadline_s
            while len(out) < count and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(
                        Received(m.offset, m.key, m.value, _norm_headers(m.headers), m.timestamp)
                        for m in batch
                    )
            return out
        finally:
            await consumer.stop()

    def earliest_latest(self, topic: str, partition: int = 0) -> tuple[int, int]:
        return asyncio.run(self._earliest_latest(topic, partition))

    async def _earliest_latest(self, topic, partition):
        from aiokafka import TopicPartition

        consumer = self._consumer()
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            return (await consumer.beginning_offsets([tp]))[tp], (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()

    def offset_for_time(self, topic: str, timestamp_ms: int, partition: int = 0) -> int:
        return asyncio.run(self._offset_for_time(topic, timestamp_ms, partition))

    async def _offset_for_time(self, topic, timestamp_ms, partition):
        from aiokafka import TopicPartition

        consumer = self._consumer()
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            found = (await consumer.offsets_for_times({tp: timestamp_ms}))[tp]
            return -1 if found is None else found.offset
        finally:
            await consumer.stop()


def _offsets_or_raise(results: list[object]) -> list[int]:
    errors = [r for r in results if not isinstance(r, int)]
    if errors:
        raise DeliveryError(
            f"{len(errors)} of {len(results)} records failed; first: {errors[0]!r}", errors[0]
        )
    return results  # type: ignore[return-value]


def sample_records(count: int, *, base_timestamp_ms: int, seed: int = 0) -> list[Sent]:
    """Records that exercise the format: null keys, null and empty values, repeated header keys,
    compressible and incompressible values, explicit increasing timestamps.

    Never both key and value null (kafka-python and aiokafka refuse such a record)."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        if i % 7 == 3 and key is not None:
            value = None
        elif i % 11 == 4:
            value = b""
        elif i % 2:
            value = (f"value {i} " * rng.randint(1, 60)).encode()
        else:
            value = rng.randbytes(rng.randint(1, 2000))
        headers: tuple[tuple[str, bytes], ...] = ()
        if i % 3 == 1:
            headers = (("trace", rng.randbytes(8)), ("dup", b"a"), ("dup", b""), ("ü-nicode", "é".encode()))
        out.append(Sent(key, value, headers, base_timestamp_ms + 13 * i))
    return out


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for the answer."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[topic].result(timeout=30)
