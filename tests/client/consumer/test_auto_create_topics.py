"""allow.auto.create.topics: a consumer subscribing to a topic that does not exist asks Metadata for it
with allow_auto_topic_creation set to the config's value, so a broker with auto.create.topics.enable
(ours, here) creates it only when the consumer allows it too. Both group protocols."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncAdminClient
from onceflow.client.consumer import AsyncConsumer

PROTOCOLS = ["classic", "consumer"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("auto-create"),
        extra_args=[
            "--config",
            "auto.create.topics.enable=true",
            "--config",
            "num.partitions=3",
            "--config",
            "group.initial.rebalance.delay.ms=0",
        ],
    )
    proc.start()
    yield proc
    proc.stop()


async def subscribe_and_join(bootstrap: str, topic: str, protocol: str, allow: bool) -> tuple[list[str], int]:
    """Subscribe to ``topic`` and poll until the member is in the group (so it has asked for the
    topic's metadata); the cluster's topics then, and the partitions the member got."""
    c = AsyncConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-g",
        group_protocol=protocol,
        allow_auto_create_topics=allow,
    )
    try:
        deadline = time.monotonic() + 30
        while c.group_metadata().generation_id < 1 or (allow and not c.assignment()):
            assert time.monotonic() < deadline, "the consumer never joined its group" + (
                " with the topic's partitions" if allow else ""
            )
            await c.poll(timeout_ms=200)
        await c.poll(timeout_ms=200)
        async with AsyncAdminClient(bootstrap) as admin:
            return await admin.list_topics(), len(c.assignment())
    finally:
        await c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribing_to_a_missing_topic_creates_it_when_the_consumer_allows(broker, protocol):
    topic = topic_name("auto-create-yes")
    topics, assigned = asyncio.run(subscribe_and_join(broker.bootstrap, topic, protocol, allow=True))
    assert topic in topics
    assert assigned == 3  # the broker's num.partitions, all to the only member


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribing_to_a_missing_topic_leaves_it_missing_when_the_consumer_does_not_allow(broker, protocol):
    topic = topic_name("auto-create-no")
    topics, assigned = asyncio.run(subscribe_and_join(broker.bootstrap, topic, protocol, allow=False))
    assert topic not in topics and assigned == 0
