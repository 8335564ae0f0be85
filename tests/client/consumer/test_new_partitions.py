"""Partitions added to a subscribed topic reach the group, end to end against our broker (KIP-848:
the coordinator notices the new partitions itself and bumps the group epoch)."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncAdminClient, AsyncClient
from onceflow.client.async_client import LATEST_TIMESTAMP
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.protocol.record_codec import encode_batch

# -- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("new-partitions"),
        extra_args=["--config", "group.initial.rebalance.delay.ms=0"],
    )
    proc.start()
    yield proc
    proc.stop()


def test_a_client_whose_cached_metadata_predates_new_partitions_still_reaches_them(broker):
    """The consumer's positions (ListOffsets) and produce go to a partition's leader through the
    client's cached metadata: a partition the cache does not know yet makes it ask again."""
    topic = topic_name("stale-cache")

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
            assert sorted((await client.metadata([topic])).topics[topic].partitions) == [0]
            async with AsyncAdminClient(broker.bootstrap) as admin:
                await admin.create_partitions(topic, 3)
            await client.produce(topic, 2, encode_batch([(None, b"x")]))
            return await client.list_offsets(topic, [1, 2], timestamp=LATEST_TIMESTAMP)

    assert asyncio.run(run()) == {1: 0, 2: 1}


DEADLINE_S = 60.0


async def poll_until(consumers, condition, what: str, seen: set) -> None:
    """Poll every consumer (records go into ``seen`` as (partition, value)) until ``condition()``."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            for r in await c.poll(timeout_ms=100):
                seen.add((r.partition, r.value))


def settled(consumers, partitions) -> bool:
    generations = {c.group_metadata().generation_id for c in consumers}
    owned = sorted(tp for c in consumers for tp in c.assignment())
    return len(generations) == 1 and min(generations) >= 1 and owned == partitions


@pytest.mark.parametrize(
    ("protocol", "members"),
    [("consumer", 1)],
    ids=["consumer-1"],
)
def test_partitions_added_to_a_subscribed_topic_are_consumed(broker, protocol, members):
    topic = topic_name(f"grow-{protocol}-{members}")
    group = topic_name(f"g-grow-{protocol}-{members}")
    settings = dict(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        group_protocol=protocol,
        auto_offset_reset="earliest",
        metadata_max_age_ms=300,
    )
    if protocol == "classic":
        settings.update(session_timeout_ms=6000, heartbeat_interval_ms=200)

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
            await client.produce(topic, 0, encode_batch([(None, b"before")]))
        consumers = [AsyncConsumer(topic, **settings) for _ in range(members)]
        seen: set = set()
        try:
            await poll_until(consumers, lambda: (0, b"before") in seen, "the first record", seen)
            # The group settled: every member in the same generation, the one partition owned once.
            await poll_until(consumers, lambda: settled(consumers, [TP(topic, 0)]), "the group", seen)
            async with AsyncAdminClient(broker.bootstrap) as admin:
                await admin.create_partitions(topic, 3)
            async with AsyncClient(broker.bootstrap) as client:
                for p in (1, 2):
                    await client.produce(topic, p, encode_batch([(None, b"new-%d" % p)]))
            await poll_until(
                consumers,
                lambda: {(1, b"new-1"), (2, b"new-2")} <= seen,
                "the records of the new partitions",
                seen,
            )
            owned = sorted(tp for c in consumers for tp in c.assignment())
            assert owned == [TP(topic, 0), TP(topic, 1), TP(topic, 2)]
        finally:
            for c in consumers:
                await c.close()

    asyncio.run(run())
