"""A fixed-bucket histogram of milliseconds: what a request's hot path pays is one ``bisect`` and two
additions; the cumulative buckets Prometheus wants are made at scrape time.

Kafka's request histograms (Yammer ``Histogram``s such as ``TotalTimeMs``) reach Prometheus through
the JMX exporter as percentile gauges over a decaying sample. Here they are real Prometheus
histograms under the same names: ``_count`` is the exporter's ``_count``, ``_sum`` comes with it, and
percentiles come from the buckets (``histogram_quantile``), across brokers too.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds in ms: from a tenth of a millisecond (a small request on an idle broker) to 30 s
# (a long-polling fetch waits fetch.max.wait.ms, 500 ms by default; request.timeout.ms is 30 s).
BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)
BUCKETS_MS += (10000.0, 30000.0)
_BOUND_LABELS = tuple(repr(b) for b in BUCKETS_MS) + ("+Inf",)


class Histogram:
    """Counts of observations per bucket (the last one: above every bound) and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)
        self.sum = 0.0

    def observe(self, value_ms: float) -> None:
        self.counts[bisect_left(BUCKETS_MS, value_ms)] += 1
        self.sum += value_ms

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, observations at or below it)`` for each bound, ending with ``+Inf``."""
        total = 0
        out = []
        for label, n in zip(_BOUND_LABELS, self.counts, strict=True):
            total += n
            out.append((label, total))
        return out
