"""connections.max.idle.ms: the broker closes connections that read and write nothing for that long,
never one that owes an answer, and real clients carry on over a new connection."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from onceflow.broker.config import BrokerConfig
from onceflow.broker.idle_connections import idle_connections
from onceflow.client import AsyncProducer

from .raw_client import RawClient, running_broker
from .test_produce_fetch import fetch_request, fetched


class FakeConnection:
    def __init__(self, idle_since: float | None) -> None:
        self._idle_since = idle_since

    def idle_since(self) -> float | None:
        return self._idle_since

    def abort(self) -> None:
        raise AssertionError("idle_connections only picks; the caller aborts")


def test_idle_connections_are_the_quiet_ones_owing_nothing():
    quiet, recent, owing = FakeConnection(100.0), FakeConnection(108.0), FakeConnection(None)
    assert idle_connections([quiet, recent, owing], now=110.0, max_idle_s=5.0) == [quiet]
    assert idle_connections([quiet, recent, owing], now=104.0, max_idle_s=5.0) == []


def test_zero_is_refused_and_negative_never_closes():
    with pytest.raises(ValueError, match="connections.max.idle.ms"):
        BrokerConfig(connections_max_idle_ms=0)
    assert BrokerConfig(connections_max_idle_ms=-1).connections_max_idle_ms == -1


def test_a_quiet_connection_is_closed_and_one_owing_a_long_poll_is_not(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, connections_max_idle_ms=200) as broker:
            broker.topics.create_topic("t", 1)
            quiet = await RawClient.connect(broker.port)
            assert (await quiet.request(ApiVersionsRequest(), 3)).error_code == 0
            polling = await RawClient.connect(broker.port)
            # Waits 1.5 s for data that never comes: idle by its bytes, but it owes an answer.
            long_poll = await polling.request(fetch_request("t", {0: 0}, max_wait_ms=1500, min_bytes=1), 12)
            assert fetched(long_poll).error_code == 0 and fetched(long_poll).records == b""
            assert await quiet.is_closed_by_broker(timeout=30)
            assert await polling.is_closed_by_broker(timeout=30)  # quiet itself once answered
            await quiet.close()
            await polling.close()

    asyncio.run(scenario())


def test_our_producer_reconnects_after_the_broker_closed_its_idle_connections(tmp_path):
    """(librdkafka reconnects too, but with an idle limit this short its re-bootstrap after losing its
    only broker only sends ApiVersions before each new connection is idle again, for tens of seconds;
    with Kafka's 10-minute default its metadata refresh keeps the connection busy.)"""

    async def scenario():
        async with running_broker(tmp_path, connections_max_idle_ms=200) as broker:
            broker.topics.create_topic("t", 1)
            ours = AsyncProducer(bootstrap_servers=f"127.0.0.1:{broker.port}", enable_idempotence=True)
            try:
                first = await (await ours.send("t", b"before"))
                await wait_until_closed(broker, set(broker._connections))
                second = await (await ours.send("t", b"after"))
            finally:
                await ours.close()
            assert (first.offset, second.offset) == (0, 1)
            assert broker.topics.get_partition("t", 0).log.log_end_offset == 2

    asyncio.run(scenario())


async def wait_until_closed(broker, connections: set, timeout: float = 30.0) -> None:
    """Until the broker has closed every one of ``connections`` (clients may open new ones meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while connections & broker._connections:
        assert asyncio.get_running_loop().time() < deadline, "the broker never closed the idle connections"
        await asyncio.sleep(0.05)
