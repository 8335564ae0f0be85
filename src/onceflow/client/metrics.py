"""Client metrics the way Kafka's clients keep them: sensors that record values, and named metrics
(``record-send-rate``, ``request-latency-avg``, ...) read from them on demand.

Kafka's ``Metrics``/``Sensor`` design in small: a :class:`Sensor` keeps a cumulative total and count
(the ``-total`` metrics) plus a few time windows (Kafka's ``metrics.sample.window.ms`` = 30 s,
``metrics.num.samples`` = 2) from which rates, averages and maxima are read, so a rate shows the last
30-60 seconds and not the whole life of the client. Recording is a handful of additions: callers
record per batch or per request, never per record, and pass one clock reading for many records.

A metric is named by :class:`MetricName` (name, group, tags), as Kafka's ``MetricName``; a client's
``metrics()`` returns a :class:`MetricsSnapshot`, a plain mapping from those names to floats.
Serving them to Prometheus is :mod:`onceflow.client.prometheus`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

SAMPLE_WINDOW_S = 30.0  # Kafka's metrics.sample.window.ms default
NUM_SAMPLES = 2  # Kafka's metrics.num.samples default


class MetricName(NamedTuple):
    """A metric's identity, as Kafka's: ``name`` within ``group``, with ``tags`` (sorted pairs, e.g.
    ``(("client-id", "p1"), ("topic", "orders"))``)."""

    name: str
    group: str
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def tag_dict(self) -> dict[str, str]:
        return dict(self.tags)


class _Sample:
    __slots__ = ("start", "count", "sum", "max", "min")

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0
        self.sum = 0.0
        self.max = -math.inf
        self.min = math.inf


class Sensor:
    """Values recorded over time: their cumulative sum and count, and the last :data:`NUM_SAMPLES`
    windows of :data:`SAMPLE_WINDOW_S` for rates, averages, maxima and minima (Kafka's ``Meter``,
    ``Avg``, ``Max`` and ``Min`` over a ``SampledStat``). Not locked: the owning client records on its
    event loop; a reader in another thread sees each number as it was at some moment."""

    __slots__ = ("total", "count", "_samples", "_window")

    def __init__(self, now: float | None = None, window_s: float = SAMPLE_WINDOW_S) -> None:
        now = time.monotonic() if now is None else now
        self.total = 0.0
        self.count = 0
        self._window = window_s
        self._samples = [_Sample(now)]

    def record(self, value: float = 1.0, now: float | None = None) -> None:
        if now is None:
            now = time.monotonic()
        self.total += value
        self.count += 1
        sample = self._samples[-1]
        if now - sample.start >= self._window:
            sample = self._roll(now)
        sample.count += 1
        sample.sum += value
        if value > sample.max:
            sample.max = value
        if value < sample.min:
            sample.min = value

    def _roll(self, now: float) -> _Sample:
        sample = _Sample(now)
        self._samples.append(sample)
        del self._samples[:-NUM_SAMPLES]
        return sample

    def _live(self, now: float) -> list[_Sample]:
        """The samples still inside the window (an old one ages out even when nothing is recorded)."""
        horizon = now - self._window * NUM_SAMPLES
        return [s for s in self._samples if s.start > horizon]

    def rate(self, now: float | None = None, *, of_count: bool = False) -> float:
        """The values' sum (``of_count``: how many were recorded) per second over the windows kept;
        as Kafka, the elapsed time counts at least ``NUM_SAMPLES - 1`` whole windows, so a young
        client's rate is not inflated."""
        now = time.monotonic() if now is None else now
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = now - live[0].start
        full_windows = int(elapsed // self._window)
        if full_windows < NUM_SAMPLES - 1:
            elapsed += (NUM_SAMPLES - 1 - full_windows) * self._window
        return sum(s.count if of_count else s.sum for s in live) / elapsed

    def avg(self, now: float | None = None) -> float:
        live = self._live(time.monotonic() if now is None else now)
        count = sum(s.count for s in live)
        return sum(s.sum for s in live) / count if count else math.nan

    def max(self, now: float | None = None) -> float:
        live = [s for s in self._live(time.monotonic() if now is None else now) if s.count]
        return max(s.max for s in live) if live else math.nan

    def min(self, now: float | None = None) -> float:
        live = [s for s in self._live(time.monotonic() if now is None else now) if s.count]
        return min(s.min for s in live) if live else math.nan


# How a metric reads its sensor (or a gauge function) at snapshot time.
Reader = Callable[[float], float]


class MetricsSnapshot(dict):
    """``{MetricName: value}`` at one moment (Kafka's ``metrics()`` map, values read out). A rate,
    average or maximum with nothing recorded in its window is ``nan`` (0.0 for rates), as in Kafka.

    ``value(name, group=None, **tags)`` finds one metric without spelling out its whole name:
    ``snapshot.value("record-send-total")``, ``snapshot.value("record-send-total", topic="orders")``
    (tag names with ``_`` for ``-``). It raises ``KeyError`` when nothing or more than one matches."""

    def value(self, name: str, group: str | None = None, **tags: str) -> float:
        wanted = {key.replace("_", "-"): str(value) for key, value in tags.items()}
        found = [
            (metric, value)
            for metric, value in self.items()
            if metric.name == name
            and (group is None or metric.group == group)
            and all(metric.tag_dict.get(k) == v for k, v in wanted.items())
            # Without tags asked for, the client-level metric (only client-id) is meant.
            and (wanted or len(metric.tags) <= 1)
        ]
        if len(found) != 1:
            which = f"{name}" + (f" in {group}" if group else "") + (f" with {wanted}" if wanted else "")
            raise KeyError(f"{len(found)} metrics match {which}")
        return found[0][1]


class MetricsRegistry:
    """One client's metrics: names with the function that reads each, and the sensors behind them.
    Tagged families (per topic, per partition) are added when first seen."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._readers: dict[MetricName, Reader] = {}
        self.descriptions: dict[MetricName, str] = {}

    def name(self, name: str, group: str, **tags: str) -> MetricName:
        pairs = {"client-id": self.client_id}
        pairs.update({key.replace("_", "-"): str(value) for key, value in tags.items()})
        return MetricName(name, group, tuple(sorted(pairs.items())))

    def add(self, metric: MetricName, reader: Reader, description: str) -> None:
        self._readers[metric] = reader
        self.descriptions[metric] = description

    def sensor(
        self,
        group: str,
        stats: Iterable[tuple[str, str, str]],
        now: float | None = None,
        **tags: str,
    ) -> Sensor:
        """A new sensor and its metrics: ``stats`` are ``(metric name, stat, description)`` with stat
        one of ``total``, ``rate``, ``avg``, ``max``, ``min`` (Kafka's CumulativeSum, Meter's two
        halves, Avg, Max, Min) or ``count-total``, ``count-rate`` (a Meter of WindowedCount: how
        many values were recorded, whatever they were)."""
        sensor = Sensor(now)
        for metric, stat, description in stats:
            self.add(self.name(metric, group, **tags), _reader(sensor, stat), description)
        return sensor

    def gauge(self, name: str, group: str, read: Callable[[], float], description: str, **tags: str) -> None:
        self.add(self.name(name, group, **tags), lambda _now: float(read()), description)

    def remove_tagged(self, **tags: str) -> None:
        """Forget the metrics carrying these tags (a partition no longer assigned)."""
        wanted = {(key.replace("_", "-"), str(value)) for key, value in tags.items()}
        for metric in [m for m in self._readers if wanted <= set(m.tags)]:
            del self._readers[metric]
            self.descriptions.pop(metric, None)

    def snapshot(self) -> MetricsSnapshot:
        now = time.monotonic()
        return MetricsSnapshot((metric, read(now)) for metric, read in list(self._readers.items()))


def _reader(sensor: Sensor, stat: str) -> Reader:
    if stat == "total":
        return lambda _now: sensor.total
    if stat == "count-total":
        return lambda _now: float(sensor.count)
    if stat == "count-rate":
        return lambda now: sensor.rate(now, of_count=True)
    if stat == "rate":
        return sensor.rate
    if stat == "avg":
        return sensor.avg
    if stat == "max":
        return sensor.max
    if stat == "min":
        return sensor.min
    raise ValueError(f"unknown stat {stat!r}")


def meter(name: str, what: str, *, of_count: bool = False) -> list[tuple[str, str, str]]:
    """Kafka's ``Meter``: ``<name>-rate`` (per second) and ``<name>-total`` of the same sensor, of
    the values recorded or (``of_count``) of how many were."""
    prefix = "count-" if of_count else ""
    return [
        (f"{name}-rate", f"{prefix}rate", f"{what} per second"),
        (f"{name}-total", f"{prefix}total", f"{what} in total"),
    ]


def elapsed_ns(start: float) -> float:
    """Nanoseconds since ``start`` (a ``time.perf_counter()`` reading), for the ``-time-ns-total``
    metrics."""
    return (time.perf_counter() - start) * 1e9
