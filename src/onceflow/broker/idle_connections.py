"""``connections.max.idle.ms``: the broker closes a connection that has read and written nothing for
that long (Kafka's default: 10 minutes), as Kafka's network layer does, so clients that went away
without closing (a crashed process behind a NAT, a half-open TCP connection) do not hold sockets and
buffers forever. A connection that owes an answer (a fetch long-polling) is never idle. Clients
reconnect when they next need the broker. A negative setting keeps connections forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger(__name__)

# How often at most the connections are checked; a connection closes at most this late.
MAX_CHECK_INTERVAL_S = 30.0


class IdleTracked(Protocol):
    def idle_since(self) -> float | None: ...

    def abort(self) -> None: ...


def idle_connections(connections: Iterable[IdleTracked], now: float, max_idle_s: float) -> list[IdleTracked]:
    """The connections idle (see ``ClientProtocol.idle_since``) for longer than ``max_idle_s`` at ``now``."""
    idle = []
    for connection in connections:
        since = connection.idle_since()
        if since is not None and now - since > max_idle_s:
            idle.append(connection)
    return idle


async def close_idle_connections(connections: Callable[[], Iterable[IdleTracked]], max_idle_ms: int) -> None:
    """Forever: every ``min(max_idle / 4, 30 s)``, abort the connections idle for over ``max_idle_ms``."""
    max_idle_s = max_idle_ms / 1000.0
    interval = min(max_idle_s / 4, MAX_CHECK_INTERVAL_S)
    while True:
        await asyncio.sleep(interval)
        for connection in idle_connections(list(connections()), time.monotonic(), max_idle_s):
            log.debug("closing a connection idle for over %d ms (connections.max.idle.ms)", max_idle_ms)
            connection.abort()
