"""max.connections, max.connections.per.ip (+ overrides) and max.connection.creation.rate: the
bookkeeping without sockets, then a real broker closing the connection over the limit at once while
another address still gets in."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from onceflow.broker.config import BrokerConfig
from onceflow.broker.connection_limits import ConnectionLimits, parse_per_ip_overrides
from onceflow.broker.limit_events import (
    CONNECTION_CREATION_RATE,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
)

from .raw_client import RawClient, running_broker


def test_the_connection_over_the_per_address_limit_is_refused_and_others_still_get_in():
    limits = ConnectionLimits(max_connections_per_ip=10, per_ip_overrides={"127.0.0.3": 1})
    assert [limits.admit("127.0.0.1", 0) for _ in range(10)] == [None] * 10
    assert limits.admit("127.0.0.1", 0) == MAX_CONNECTIONS_PER_IP
    assert limits.admit("127.0.0.2", 0) is None
    assert limits.admit("127.0.0.3", 0) is None  # its override: one
    assert limits.admit("127.0.0.3", 0) == MAX_CONNECTIONS_PER_IP
    limits.release("127.0.0.1")
    assert limits.admit("127.0.0.1", 0) is None
    assert limits.open == 12 and limits.open_by_address == {"127.0.0.1": 10, "127.0.0.2": 1, "127.0.0.3": 1}


def test_max_connections_counts_every_address():
    limits = ConnectionLimits(max_connections=3)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        assert limits.admit(address, 0) is None
    assert limits.admit("10.0.0.4", 0) == MAX_CONNECTIONS
    limits.release("10.0.0.2")
    assert limits.admit("10.0.0.4", 0) is None


def test_the_creation_rate_is_judged_over_the_sample_windows_and_refusals_do_not_count():
    # 5 a second over 11 windows of 1 s: a first burst is measured over 10 s, so 50 get in.
    limits = ConnectionLimits(max_creation_rate=5, quota_window_num=11, quota_window_size_ms=1000)
    admitted = [limits.admit("10.0.0.1", 0) for _ in range(50)]
    assert admitted == [None] * 50
    assert limits.admit("10.0.0.1", 0) == CONNECTION_CREATION_RATE
    for _ in range(100):  # a flood of refused attempts, in a later window
        assert limits.admit("10.0.0.2", 5_000) == CONNECTION_CREATION_RATE
    # Once the burst's window has left the horizon, connections get in again at once: the refused
    # attempts, still inside it, were not counted as connections made.
    assert limits.admit("10.0.0.2", 11_000) is None


def test_per_ip_overrides_parse_addresses_and_names_and_say_what_is_wrong():
    resolved = parse_per_ip_overrides(" 127.0.0.2:20, [::1]:3,broker-a:0", resolve=lambda name: "10.1.2.3")
    assert resolved == {"127.0.0.2": 20, "::1": 3, "10.1.2.3": 0}
    assert parse_per_ip_overrides("") == {}
    for bad in ("127.0.0.2", "127.0.0.2:x", ":4", "127.0.0.2:-1"):
        with pytest.raises(ValueError, match="host:count"):
            parse_per_ip_overrides(bad)

    def unresolvable(name):
        raise OSError("no such host")

    with pytest.raises(ValueError, match="cannot resolve 'nowhere'"):
        parse_per_ip_overrides("nowhere:3", resolve=unresolvable)


def test_config_checks_the_limits():
    assert BrokerConfig().max_connections_per_ip == 2**31 - 1
    with pytest.raises(ValueError, match=r"max.connections.per.ip can be 0 only"):
        BrokerConfig(max_connections_per_ip=0)
    assert BrokerConfig(max_connections_per_ip=0, max_connections_per_ip_overrides="127.0.0.1:5")
    with pytest.raises(ValueError, match=r"max.connections must be >= 0"):
        BrokerConfig(max_connections=-1)


async def _connect(port: int, source: str) -> RawClient:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return RawClient(reader, writer)


def test_the_eleventh_connection_from_one_address_is_closed_and_another_address_connects(tmp_path):
    async def scenario():
        async with running_broker(
            tmp_path, max_connections_per_ip=10, max_connections_per_ip_overrides="127.0.0.3:1"
        ) as broker:
            clients = [await _connect(broker.port, "127.0.0.1") for _ in range(10)]
            for client in clients:
                assert (await client.request(ApiVersionsRequest(), 3)).error_code == 0
            eleventh = await _connect(broker.port, "127.0.0.1")
            assert await eleventh.is_closed_by_broker(timeout=10)
            other = await _connect(broker.port, "127.0.0.2")
            assert (await other.request(ApiVersionsRequest(), 3)).error_code == 0
            overridden = [await _connect(broker.port, "127.0.0.3") for _ in range(2)]
            assert (await overridden[0].request(ApiVersionsRequest(), 3)).error_code == 0
            assert await overridden[1].is_closed_by_broker(timeout=10)
            assert broker.limit_events.counts[MAX_CONNECTIONS_PER_IP] == 2
            # A closed connection frees its place.
            await clients.pop().close()
            for _ in range(100):
                if broker.connection_limits.open_by_address.get("127.0.0.1") == 9:
                    break
                await asyncio.sleep(0.05)
            again = await _connect(broker.port, "127.0.0.1")
            assert (await again.request(ApiVersionsRequest(), 3)).error_code == 0
            for client in [*clients, eleventh, other, *overridden, again]:
                await client.close()

    asyncio.run(scenario())
