"""Interop: records produced by confluent-kafka are read unchanged by our consumer, and our consumer
shares a group's partitions with a confluent-kafka consumer."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from tests.conftest import topic_name
from tests.helpers.clients import CODECS, Received, adapter, create_topic, sample_records

from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("codec", ("none", *CODECS))
def test_confluent_produced_records_read_back_identical(broker, codec):
    topic = topic_name(f"interop-{codec}")
    create_topic(broker.bootstrap, topic)
    sent = sample_records(120, base_timestamp_ms=int(time.time() * 1000) - 3_600_000, seed=len(codec))
    adapter("confluent", broker.bootstrap).produce(topic, sent, compression=codec)

    async def read() -> list[Received]:
        got = []
        async with AsyncConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TP(topic, 0)])
            while len(got) < len(sent):
                for records in (await consumer.getmany(timeout_ms=5000)).values():
                    got += [
                        Received(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records
                    ]
        return got

    got = asyncio.run(read())
    assert [r.offset for r in got] == list(range(len(sent)))
    assert [r.as_sent() for r in got] == sent


def test_same_group_as_confluent_consumer_shares_partitions(broker):
    from confluent_kafka import Consumer as ConfluentConsumer

    topic = topic_name("interop-group")
    group = topic_name("interop-g")
    create_topic(broker.bootstrap, topic, partitions=6)
    theirs: set[int] = set()
    stop = threading.Event()

    def confluent_member():
        c = ConfluentConsumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range",
        })  # fmt: skip
        c.subscribe([topic], on_assign=lambda _c, ps: theirs.update(p.partition for p in ps),
                     on_revoke=lambda _c, ps: theirs.difference_update(p.partition for p in ps))  # fmt: skip
        while not stop.is_set():
            c.poll(0.1)
        c.close()

    thread = threading.Thread(target=confluent_member, daemon=True)
    thread.start()

    async def ours() -> tuple[set[int], set[int]]:
        async with AsyncConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group, session_timeout_ms=6000,
            heartbeat_interval_ms=500, partition_assignment_strategy="range",
        ) as consumer:  # fmt: skip
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await consumer.getmany(timeout_ms=200)
                mine = {tp.partition for tp in consumer.assignment()}
                if mine and theirs and mine | theirs == set(range(6)) and not mine & theirs:
                    return mine, set(theirs)  # a snapshot: closing the peer revokes its partitions
            raise AssertionError(f"no shared assignment: ours {consumer.assignment()}, theirs {theirs}")

    try:
        mine, theirs_then = asyncio.run(ours())
    finally:
        stop.set()
        thread.join(timeout=30)
    assert len(mine) == 3 and len(theirs_then) == 3
