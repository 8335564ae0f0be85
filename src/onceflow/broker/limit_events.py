"""Every time a broker limit bites, counted, and logged at most once per kind per interval.

A hostile client can make a limit bite thousands of times a second (a connection refused, a
connection stopped for memory, a request throttled); one log line each would flood the log and cost
more than the limit saves. ``LimitEvents.record`` counts every event under its kind and logs one
line per kind per ``interval_s``, saying how many happened since the last line. ``counts`` is the
one plain place the metrics issue can export from (kind -> total since the broker started).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# The kinds of events (the keys of ``LimitEvents.counts``).
MEMORY_POOL_FULL = "memory-pool-full"  # a connection stopped reading until the pool had room
MAX_CONNECTIONS = "max-connections"  # a connection refused: max.connections
MAX_CONNECTIONS_PER_IP = "max-connections-per-ip"  # refused: max.connections.per.ip (or an override)
CONNECTION_CREATION_RATE = "connection-creation-rate"  # refused: max.connection.creation.rate
PRODUCE_THROTTLED = "produce-throttled"  # a Produce answer carried a throttle time (byte rate quota)
FETCH_THROTTLED = "fetch-throttled"  # a Fetch answer carried a throttle time (byte rate quota)
REQUEST_THROTTLED = "request-throttled"  # an answer carried a throttle time (request percentage quota)
FAILED_AUTHENTICATION = "failed-authentication"  # a SASL authentication failed (its connection closes)

KINDS = (
    MEMORY_POOL_FULL,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    CONNECTION_CREATION_RATE,
    PRODUCE_THROTTLED,
    FETCH_THROTTLED,
    REQUEST_THROTTLED,
    FAILED_AUTHENTICATION,
)

DEFAULT_INTERVAL_S = 30.0


class LimitEvents:
    """Counters of limit events by kind, with rate-limited log lines."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._last_logged: dict[str, float] = {}
        self._since_logged: dict[str, int] = {}

    def record(self, kind: str, message: str, *args: object) -> bool:
        """Count one ``kind`` event; log ``message % args`` if no line of this kind was logged within
        the interval. Returns whether it logged."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._since_logged[kind] = self._since_logged.get(kind, 0) + 1
        now = self._clock()
        last = self._last_logged.get(kind)
        if last is not None and now - last < self.interval_s:
            return False
        happened = self._since_logged.pop(kind)
        self._last_logged[kind] = now
        if last is None:
            log.warning("%s: " + message, kind, *args)
        else:
            log.warning(
                "%s: " + message + " (%d such events in the last %.0f s)", kind, *args, happened, now - last
            )
        return True
