"""queued.max.request.bytes without sockets: the pool's accounting and queue, and how a connection's
buffers follow the bytes that arrived rather than the sizes that were announced."""

from __future__ import annotations

import logging
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from onceflow.broker.config import BrokerConfig
from onceflow.broker.connection import (
    FRAME_BUFFER_GROWTH,
    INITIAL_RECEIVE_BUFFER_BYTES,
    NEED_DATA,
    NEED_MEMORY,
    Connection,
    ConnectionBroken,
    RequestReceived,
    SupportedApi,
)
from onceflow.broker.limit_events import MEMORY_POOL_FULL, LimitEvents
from onceflow.broker.memory_pool import SMALL_REQUEST_BYTES, MemoryPool

SUPPORTED = {
    18: SupportedApi(18, 0, 4, ApiVersionsRequest),
    3: SupportedApi(3, 0, 13, MetadataRequest),
}
MB = 1 << 20


def big_frame(size: int, correlation_id: int = 1) -> bytes:
    """An ApiVersions v3 request of about ``size`` bytes (a long client software name)."""
    request = ApiVersionsRequest(client_software_name="x" * size, client_software_version="1")
    request.API_VERSION = 3
    request.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(request.encode(header=True, framed=True))


def small_frame(correlation_id: int = 1) -> bytes:
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    request.API_VERSION = 12
    request.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(request.encode(header=True, framed=True))


def read(conn: Connection, data: bytes) -> list:
    """Feed ``data`` as reads of at most what ``get_buffer`` offers, draining events after each, as
    the broker does; stop at the first ``NEED_MEMORY`` or ``ConnectionBroken`` (the broker stops
    reading there)."""
    events = []
    pos = 0
    while pos < len(data):
        target = conn.get_buffer(-1)
        count = min(len(target), len(data) - pos)
        target[:count] = data[pos : pos + count]
        conn.buffer_updated(count)
        pos += count
        while (event := conn.next_event()) is not NEED_DATA:
            events.append(event)
            if event is NEED_MEMORY or isinstance(event, ConnectionBroken):
                return events
    return events


# -- the pool ----------------------------------------------------------------------------------------


def test_the_pool_grants_while_not_full_even_past_its_capacity_then_refuses():
    pool = MemoryPool(10 * MB)
    assert pool.try_allocate(8 * MB)
    # Not full yet: one more request is granted even though it takes the pool past its capacity
    # (a request bigger than the whole pool must still get through, as in Kafka's pool).
    assert pool.try_allocate(5 * MB)
    assert pool.used == 13 * MB and pool.peak == 13 * MB
    assert not pool.try_allocate(1000)
    assert pool.refusals == 1
    pool.release(5 * MB)
    assert pool.try_allocate(1000)


def test_the_last_eighth_is_kept_for_small_requests():
    pool = MemoryPool(8 * MB)
    assert pool.try_allocate(7 * MB)
    assert not pool.try_allocate(SMALL_REQUEST_BYTES + 1)  # a large one: the rest is the reserve
    assert pool.try_allocate(SMALL_REQUEST_BYTES)  # a small one still gets memory
    assert pool.try_allocate(100)


def test_waiters_are_granted_oldest_first_each_kind_on_its_own():
    granted = []
    pool = MemoryPool(8 * MB)
    pool.take(8 * MB)
    pool.wait(2 * MB, lambda: granted.append("large-1"))
    pool.wait(1 * MB, lambda: granted.append("large-2"))
    pool.wait(100, lambda: granted.append("small"))
    # Others queue behind the waiters even where a grant would fit.
    pool.release(7 * MB)  # 1 MB in use: under the large limit (7 MB)
    assert granted == ["small", "large-1", "large-2"]
    assert pool.used == 1 * MB + 100 + 3 * MB
    assert pool.waiting == 0


def test_a_new_request_queues_behind_the_waiters_of_its_kind_and_a_cancelled_waiter_gets_nothing():
    granted = []
    pool = MemoryPool(8 * MB)
    pool.take(8 * MB)
    first = lambda: granted.append("first")  # noqa: E731
    pool.wait(100, first)
    assert not pool.try_allocate(100)  # refused although the pool may have room later: fairness
    pool.cancel(first)
    pool.release(8 * MB)
    assert granted == [] and pool.used == 0
    assert pool.try_allocate(100)


def test_an_unbounded_pool_grants_everything():
    pool = MemoryPool(-1)
    assert pool.try_allocate(10**12) and pool.try_allocate(10**12)


def test_the_config_bound_is_at_least_one_request_or_none():
    assert BrokerConfig().queued_max_request_bytes == 256 * MB
    assert BrokerConfig(queued_max_request_bytes=-1).queued_max_request_bytes == -1
    with pytest.raises(ValueError, match="queued.max.request.bytes"):
        BrokerConfig(queued_max_request_bytes=MB)  # below socket.request.max.bytes (100 MB)
    assert BrokerConfig(queued_max_request_bytes=MB, socket_request_max_bytes=MB)


# -- a connection's buffers ---------------------------------------------------------------------------


def test_an_announced_frame_takes_no_memory_until_its_bytes_come():
    pool = MemoryPool(256 * MB)
    conn = Connection(SUPPORTED, max_request_bytes=100 * MB, pool=pool)
    # The attack: a 50 MB frame announced, 1 KB of it sent.
    events = read(conn, struct.pack(">i", 50 * MB) + bytes(1024))
    assert events == []
    assert pool.used == 0
    assert len(conn.get_buffer(-1)) <= INITIAL_RECEIVE_BUFFER_BYTES  # still the receive buffer
    conn.close()
    assert pool.used == 0


def test_a_frame_gets_its_whole_buffer_once_a_sixteenth_of_it_has_come():
    pool = MemoryPool(256 * MB)
    conn = Connection(SUPPORTED, max_request_bytes=100 * MB, pool=pool)
    data = big_frame(MB)
    size = len(data) - 4
    part = 4 + size // FRAME_BUFFER_GROWTH + 1
    assert read(conn, data[:part]) == []
    # One buffer for the whole frame, taken from the pool; the rest is read straight into it.
    assert pool.used == size
    assert len(conn.get_buffer(-1)) == size - (part - 4)
    [event] = read(conn, data[part:])
    assert isinstance(event, RequestReceived)
    assert event.charged == size and event.size == size
    assert event.request.client_software_name == "x" * MB
    pool.release(event.charged)
    assert pool.used == 0


def test_a_frame_that_comes_slowly_holds_at_most_sixteen_times_what_arrived():
    pool = MemoryPool(256 * MB)
    # A small receive buffer, so that the frame cannot wait in it until it is trusted.
    conn = Connection(SUPPORTED, max_request_bytes=100 * MB, pool=pool, receive_buffer_bytes=32 * 1024)
    data = big_frame(4 * MB)
    events = []
    for pos in range(0, len(data), 8192):
        events += read(conn, data[pos : pos + 8192])
        if not events:
            received = min(pos + 8192, len(data))
            assert pool.used <= FRAME_BUFFER_GROWTH * received, received
    [event] = events
    assert event.request.client_software_name == "x" * (4 * MB)
    assert event.charged == event.size == len(data) - 4 == pool.used


def test_a_refused_connection_waits_for_the_pool_and_then_goes_on():
    pool = MemoryPool(MB)
    pool.take(MB)  # somebody else's requests fill it
    conn = Connection(SUPPORTED, max_request_bytes=MB, pool=pool)
    data = small_frame(7)
    assert read(conn, data) == [NEED_MEMORY]
    assert conn.wanted == len(data) - 4
    assert conn.next_event() is NEED_MEMORY  # until granted, whatever is asked
    granted = []
    pool.wait(conn.wanted, lambda: granted.append(True))
    assert granted == []
    pool.release(MB)
    assert granted == [True]
    conn.memory_granted()
    event = conn.next_event()
    assert isinstance(event, RequestReceived) and event.header.correlation_id == 7
    assert pool.used == event.charged == len(data) - 4


def test_close_and_a_broken_frame_give_their_memory_back():
    pool = MemoryPool(256 * MB)
    conn = Connection(SUPPORTED, max_request_bytes=100 * MB, pool=pool)
    data = big_frame(MB)
    read(conn, data[: len(data) // 2])
    assert pool.used > 0
    conn.close()
    assert pool.used == 0
    # A complete frame that cannot be decoded is never handed out: its bytes go back at once.
    conn = Connection(SUPPORTED, max_request_bytes=100 * MB, pool=pool)
    body = struct.pack(">hhih", 9999, 0, 1, -1) + bytes(100_000)
    [event] = read(conn, struct.pack(">i", len(body)) + body)
    assert isinstance(event, ConnectionBroken)
    assert pool.used == 0


# -- limit events -------------------------------------------------------------------------------------


def test_limit_events_count_each_and_log_once_per_kind_per_interval(caplog):
    now = [100.0]
    events = LimitEvents(interval_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="onceflow.broker.limit_events"):
        for i in range(1000):
            events.record(MEMORY_POOL_FULL, "connection %d waits", i)
        now[0] += 31
        events.record(MEMORY_POOL_FULL, "connection %d waits", 1000)
    assert events.counts[MEMORY_POOL_FULL] == 1001
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0] == "memory-pool-full: connection 0 waits"
    assert lines[1].startswith("memory-pool-full: connection 1000 waits (1000 such events in the last 31 s)")
