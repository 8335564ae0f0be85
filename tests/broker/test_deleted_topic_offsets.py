"""Deleting a topic removes the groups' committed offsets of its partitions (Kafka's coordinator does
the same): a topic created again under that name starts its groups from nothing, instead of at the old
topic's offsets, which made a consumer skip the new topic's first records without an error."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .raw_client import running_broker


def _admin(port: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})


def _create(port: int, topic: str) -> None:
    admin = _admin(port)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)


def _delete(port: int, topic: str) -> None:
    admin = _admin(port)
    admin.delete_topics([topic])[topic].result(10)


def _groups(port: int) -> set[str]:
    admin = _admin(port)
    return {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def _consumer(port: int, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def _commit(port: int, group: str, offsets: list[tuple[str, int, int]]) -> None:
    consumer = _consumer(port, group)
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
    finally:
        consumer.close()


def _committed(port: int, group: str, topic: str) -> list[int]:
    consumer = _consumer(port, group)
    try:
        return [
            tp.offset for tp in consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
        ]
    finally:
        consumer.close()


def _produce(port: int, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0


def _read_as_group(port: int, group: str, topic: str, count: int) -> list[int]:
    consumer = _consumer(port, group)
    consumer.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen.append(message.offset())
    finally:
        consumer.close()
    return seen


def test_a_recreated_topic_does_not_inherit_the_old_topics_committed_offsets(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            port = broker.port
            await asyncio.to_thread(_create, port, "stale")
            await asyncio.to_thread(_create, port, "other")
            await asyncio.to_thread(_commit, port, "g", [("stale", 0, 100), ("stale", 1, 7), ("other", 0, 3)])
            await asyncio.to_thread(_commit, port, "only-stale", [("stale", 0, 5)])
            await asyncio.to_thread(_delete, port, "stale")
            await asyncio.to_thread(_create, port, "stale")
            # Offsets of other topics stay; the deleted topic's are gone (-1001: none).
            assert await asyncio.to_thread(_committed, port, "g", "stale") == [-1001, -1001]
            assert await asyncio.to_thread(_committed, port, "g", "other") == [3, -1001]
            # The group had no other offsets and no members: it was deleted with them.
            assert await asyncio.to_thread(_groups, port) == {"g"}
            await asyncio.to_thread(_produce, port, "stale", 150)
            # The group reads the new topic from its start (auto.offset.reset), skipping nothing.
            assert sorted(await asyncio.to_thread(_read_as_group, port, "g", "stale", 150)) == list(
                range(150)
            )
        async with running_broker(tmp_path) as restarted:  # the tombstones were written, not only forgotten
            assert await asyncio.to_thread(_committed, restarted.port, "only-stale", "stale") == [
                -1001,
                -1001,
            ]
            assert await asyncio.to_thread(_committed, restarted.port, "g", "other") == [3, -1001]

    asyncio.run(scenario())
