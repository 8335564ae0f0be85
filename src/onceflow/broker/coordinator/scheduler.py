"""Delayed callbacks for the coordinators' timers, injected so no coordinator needs an event loop.

The coordinator only asks for "call this in N ms" and "what time is it"; :class:`ManualScheduler`
answers from a fake clock for tests, :class:`AsyncioScheduler` from the running loop in the broker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class _ManualTimer:
    __slots__ = ("due_ms", "seq", "callback", "cancelled")

    def __init__(self, due_ms: int, seq: int, callback: Callable[[], None]) -> None:
        self.due_ms = due_ms
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _ManualTimer) -> bool:
        return (self.due_ms, self.seq) < (other.due_ms, other.seq)


class ManualScheduler:
    """A fake clock: time moves only when :meth:`advance` is called, firing due timers in order."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now = start_ms
        self._timers: list[_ManualTimer] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer(self._now + max(0, delay_ms), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, ms: int) -> None:
        """Move the clock forward by ``ms``, running every timer that falls due on the way."""
        target = self._now + ms
        while self._timers and self._timers[0].due_ms <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.due_ms)
            timer.callback()
        self._now = target

    def pending(self) -> int:
        return sum(1 for t in self._timers if not t.cancelled)


class AsyncioScheduler:
    """The broker's scheduler: wall-clock milliseconds and ``loop.call_later``."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(0, delay_ms) / 1000.0, callback)
