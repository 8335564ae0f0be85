"""A rate measured over sample windows, and the throttle time that brings it back under a bound:
Kafka's quota arithmetic (``Rate`` over a windowed sum, ``QuotaUtils.throttleTime``), pure and driven
by the caller's clock, for connection creation rates and client quotas alike.

The rate is the sum of the values recorded in the last ``samples`` windows of ``window_ms`` each,
divided by the time those windows span. Until ``samples - 1`` whole windows have passed, the span
counts as that long anyway, so a first burst is measured against the whole horizon (11 windows of
1 s by default: ``quota.window.num``, ``quota.window.size.seconds``). A window whose last event is
older than the whole horizon starts afresh.

When recording a value takes the rate above the bound, the throttle time is how long the client must
stay silent for the rate, over the same span, to fall back to the bound:
``(rate - bound) / bound * span``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


class SampledRate:
    """Values per second over the last ``samples`` windows of ``window_ms``."""

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms <= 0:
            raise ValueError(f"need at least one sample of a positive window, not {samples} x {window_ms} ms")
        self.samples = samples
        self.window_ms = window_ms
        # One more window than measured: the oldest may still overlap the horizon.
        self._windows: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current == len(self._windows):
                sample = _Sample(now_ms, now_ms)
                self._windows.append(sample)
            else:
                sample = self._windows[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._windows:
            self._windows.append(_Sample(now_ms, now_ms))
        return self._windows[self._current]

    def _purge(self, now_ms: int) -> None:
        horizon = self.samples * self.window_ms
        for sample in self._windows:
            if now_ms - sample.last_event_ms >= horizon:
                sample.reset(now_ms)

    def span_ms(self, now_ms: int) -> int:
        """The time the rate is measured over: since the oldest window began, at least
        ``samples - 1`` windows (plus what has passed of the current one), and never 0."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._windows), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._windows)

    def rate(self, now_ms: int) -> float:
        """Per second."""
        return self.total(now_ms) / (self.span_ms(now_ms) / 1000.0)

    def idle_since_ms(self) -> int | None:
        """When the last value was recorded (None: never)."""
        return max((s.last_event_ms for s in self._windows), default=None)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: int) -> int:
    """How long (ms) the client must wait for ``rate`` to come back to ``bound``; 0 if it is within."""
    measured = rate.rate(now_ms)
    if measured <= bound:
        return 0
    if bound <= 0:
        return rate.span_ms(now_ms)
    return int((measured - bound) / bound * rate.span_ms(now_ms) + 0.5)


def record_and_throttle_time_ms(rate: SampledRate, value: float, bound: float, now_ms: int) -> int:
    """Record ``value`` at ``now_ms``, then the throttle time it earns (see ``throttle_time_ms``)."""
    rate.record(value, now_ms)
    return throttle_time_ms(rate, bound, now_ms)
