"""What the replication process tests do to a 3-node cluster: settings that make failures quick to
notice, partition state from Metadata, waits bounded in time, preferred elections, reading a
partition whole. Built on ``tests.helpers.cluster`` (one cluster per test module)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Quick failure detection and ISR changes, so a test waits seconds, not Kafka's half minute.
FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "leader.imbalance.check.interval.seconds": "3600",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
}


@dataclass(frozen=True)
class PartitionView:
    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


def wait_until(check: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    """``check()``'s first truthy value within ``timeout`` seconds, else AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - a cluster in flux answers errors; keep asking
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, *, min_isr: int = 2) -> None:
    client = admin(bootstrap)  # kept until the futures are done: a destroyed handle fails them
    futures = client.create_topics(
        [NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_isr)})], request_timeout=30
    )
    for future in futures.values():
        future.result(30)
    wait_until(
        lambda: all(len(p.isr) == 3 for p in partitions_of(bootstrap, name).values()), 30, f"{name} in sync"
    )


def partitions_of(bootstrap: str, topic: str) -> dict[int, PartitionView]:
    md = admin(bootstrap).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        raise RuntimeError(str(t.error))
    return {
        p.id: PartitionView(p.leader, tuple(sorted(p.isrs)), tuple(p.replicas)) for p in t.partitions.values()
    }


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    return partitions_of(bootstrap, topic)[partition].leader


def elect_preferred(bootstrap: str, topic: str, partition: int = 0) -> None:
    from confluent_kafka import ElectionType

    client = admin(bootstrap)
    future = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, partition)])
    future.result(30)


def read_all(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    *,
    isolation: str = "read_uncommitted",
    timeout: float = 60,
):
    """Every record of ``topic`` up to each partition's end now: {partition: [(offset, value)]}."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF: read up to the end as of now
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            out[message.partition()].append((message.offset(), message.value()))
        if len(at_end) < partitions:
            raise AssertionError(
                f"reading {topic} did not reach the end of {partitions - len(at_end)} partitions"
            )
        return out
    finally:
        consumer.close()


# -- raw idempotent produce: the same batch, byte for byte, sent again as a producer's retry --------


def init_producer_id(address: str) -> tuple[int, int]:
    import asyncio

    from kafka.protocol.producer import InitProducerIdRequest
    from tests.helpers.cluster import request

    body = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    response = asyncio.run(request(address, body, 4))
    assert response.error_code == 0, response
    return response.producer_id, response.producer_epoch


def idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    from onceflow.protocol.record_codec import encode_batch

    return encode_batch(
        [(None, v) for v in values], producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )


def produce_raw(
    address: str, topic: str, partition: int, batch: bytes, *, acks: int = -1, timeout_ms: int = 5000
):
    """One Produce (v9) of ``batch`` to the broker at ``address``: (error code, base offset)."""
    import asyncio

    from kafka.protocol.producer import ProduceRequest
    from tests.helpers.cluster import request

    body = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    response = asyncio.run(request(address, body, 9))
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset
