"""``queued.max.request.bytes``: one budget for the memory of every request being read or queued
(Kafka's KIP-72 memory pool), without sockets or an event loop.

Connections ask the pool before they allocate a request's buffer (``try_allocate``) and give the bytes
back once the request's handler has finished (``release``). A refused connection stops reading
(``wait``) and is handed its bytes, oldest first, as soon as releases make room: the broker stops
reading instead of growing, and resumes as memory frees.

As in Kafka's pool, an allocation is granted while the pool is not yet full, even if it takes the pool
past its capacity (at most by one request): a single request bigger than the whole pool must still get
through. Unlike Kafka's, the last ``capacity / SMALL_REQUEST_RESERVE_DIVISOR`` bytes are kept for
small requests (at most ``SMALL_REQUEST_BYTES``): a crowd of large half-sent requests (slowloris
clients) can fill the rest, but Metadata, Fetch and ordinary Produce requests of everybody else still
get memory.

Kafka's default is -1 (no bound), with which one client announcing big frames on many connections
could make a broker allocate far more than the machine has; onceflow's default is 256 MiB (see
``BrokerConfig.queued_max_request_bytes``). A capacity of -1 still means no bound.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

# Allocations up to this size may use the reserve: a pipelined small request, a consumer's fetch.
SMALL_REQUEST_BYTES = 64 * 1024
# The reserve for small requests: this fraction of the capacity (32 MiB of the default 256 MiB).
SMALL_REQUEST_RESERVE_DIVISOR = 8

Waiter = Callable[[], None]


class MemoryPool:
    """Byte accounting for request buffers; ``capacity < 0`` means unbounded.

    ``schedule`` runs a waiter's callback once its bytes are granted (the broker passes
    ``loop.call_soon``, so a release never re-enters another connection's code).
    """

    def __init__(self, capacity: int, schedule: Callable[[Waiter], object] | None = None) -> None:
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self.refusals = 0  # allocations refused (each one a connection that stopped reading)
        self._schedule = schedule if schedule is not None else _call_now
        self._small_waiters: deque[tuple[int, Waiter]] = deque()
        self._large_waiters: deque[tuple[int, Waiter]] = deque()

    @property
    def bounded(self) -> bool:
        return self.capacity >= 0

    @property
    def waiting(self) -> int:
        """Connections stopped until the pool has room for them."""
        return len(self._small_waiters) + len(self._large_waiters)

    def _limit(self, size: int) -> int:
        if size <= SMALL_REQUEST_BYTES:
            return self.capacity
        return self.capacity - self.capacity // SMALL_REQUEST_RESERVE_DIVISOR

    def _fits(self, size: int) -> bool:
        return not self.bounded or self.used < self._limit(size)

    def try_allocate(self, size: int) -> bool:
        """Take ``size`` bytes if the pool has room (see the module doc); False leaves it unchanged.
        Refused while others wait for the same kind of room, so that they are served first.

        Every request read passes here: ``_fits`` and ``take`` are written out inline (one call per
        request instead of five)."""
        capacity = self.capacity
        if size <= SMALL_REQUEST_BYTES:
            refused = self._small_waiters or 0 <= capacity <= self.used
        else:
            refused = self._large_waiters or (
                capacity >= 0 and self.used >= capacity - capacity // SMALL_REQUEST_RESERVE_DIVISOR
            )
        if refused:
            self.refusals += 1
            return False
        used = self.used = self.used + size
        if used > self.peak:
            self.peak = used
        return True

    def take(self, size: int) -> None:
        """Take ``size`` bytes whether or not they fit (only for memory already committed elsewhere)."""
        self.used += size
        if self.used > self.peak:
            self.peak = self.used

    def wait(self, size: int, waiter: Waiter) -> None:
        """Queue ``waiter`` for ``size`` bytes: they are taken for it, and it is scheduled, once they fit."""
        (self._small_waiters if size <= SMALL_REQUEST_BYTES else self._large_waiters).append((size, waiter))
        self._grant_waiters()

    def cancel(self, waiter: Waiter) -> None:
        """Forget a waiter (its connection closed while waiting)."""
        for waiters in (self._small_waiters, self._large_waiters):
            for item in waiters:
                if item[1] == waiter:  # equal bound methods are not identical
                    waiters.remove(item)
                    return

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken before, and grant what now fits to the waiters, oldest first."""
        if size <= 0:
            return
        self.used -= size
        if self._small_waiters or self._large_waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        for waiters in (self._small_waiters, self._large_waiters):
            while waiters and self._fits(waiters[0][0]):
                size, waiter = waiters.popleft()
                self.take(size)
                self._schedule(waiter)


def _call_now(waiter: Waiter) -> None:
    waiter()
