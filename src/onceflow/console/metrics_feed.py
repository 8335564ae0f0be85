"""The charts' data: the broker's Prometheus ``/metrics`` (``--metrics-url``) read every few seconds
with ``prometheus_client``'s parser, kept as a short history of throughput and lag.

The names read are those the Prometheus JMX exporter's standard Kafka rules give Kafka's MBeans
(``kafka_server_brokertopicmetrics_messagesin_total`` and the bytes in/out), so the charts also work
with a Kafka broker behind the JMX exporter; consumer lag is read from ``kafka_consumergroup_lag``
(kafka_exporter's name, which Kafka dashboards use), per group summed over its partitions. A counter
becomes a rate from two scrapes; a counter that went down (a broker restart) starts over.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# series name -> the metric family (without _total) whose samples are summed
THROUGHPUT = {
    "messages_in": "kafka_server_brokertopicmetrics_messagesin",
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout",
}
LAG = "kafka_consumergroup_lag"
HISTORY = 360  # points kept (30 minutes at the default 5 s)


@dataclass
class Scrape:
    at: float  # wall-clock seconds
    counters: dict[str, float]
    lag: dict[str, float]


def parse(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """Throughput counters and lag per group from one ``/metrics`` text. A family with samples both
    with and without a ``topic`` label (the exporter's all-topics total) counts the total only."""
    counters: dict[str, float] = {}
    lag: dict[str, float] = {}
    wanted = {family: series for series, family in THROUGHPUT.items()}
    for family in text_string_to_metric_families(text):
        series = wanted.get(family.name)
        if series is not None:
            samples = [s for s in family.samples if not s.name.endswith("_created")]
            totals = [s.value for s in samples if "topic" not in s.labels]
            counters[series] = sum(totals) if totals else sum(s.value for s in samples)
        elif family.name == LAG:
            for s in family.samples:
                group = s.labels.get("consumergroup") or s.labels.get("group") or "?"
                lag[group] = lag.get(group, 0.0) + s.value
    return counters, lag


@dataclass
class MetricsFeed:
    """Scrapes ``url`` every ``interval_s`` in a task of its own while the console runs."""

    url: str
    interval_s: float = 5.0
    timeout_s: float = 5.0
    history: deque[Scrape] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last_error: str = ""
    last_success: float = 0.0
    _task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="onceflow-console-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self.scrape_once()
            await asyncio.sleep(self.interval_s)

    async def scrape_once(self) -> None:
        try:
            text = await asyncio.to_thread(self._get)
            counters, lag = parse(text)
        except Exception as exc:  # an unreachable endpoint or a bad page: shown, and tried again
            self.last_error = f"cannot read {self.url}: {exc}"
            log.debug("metrics scrape failed", exc_info=True)
            return
        self.last_error = ""
        self.last_success = time.time()
        self.history.append(Scrape(time.time(), counters, lag))

    def _get(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
            return response.read().decode("utf-8", "replace")

    def series(self) -> dict:
        """For the charts: timestamps, rates per second of each throughput counter, lag per group."""
        points = list(self.history)
        times: list[float] = []
        rates: dict[str, list[float | None]] = {name: [] for name in THROUGHPUT}
        groups = sorted({g for p in points for g in p.lag})
        lags: dict[str, list[float | None]] = {g: [] for g in groups}
        for previous, current in zip(points, points[1:], strict=False):
            elapsed = current.at - previous.at
            if elapsed <= 0:
                continue
            times.append(current.at)
            for name in THROUGHPUT:
                before, after = previous.counters.get(name), current.counters.get(name)
                if before is None or after is None:
                    rates[name].append(None)
                else:
                    rates[name].append(max(after - before, 0.0) / elapsed if after >= before else None)
            for g in groups:
                lags[g].append(current.lag.get(g))
        return {
            "times": times,
            "rates": rates,
            "lag": lags,
            "error": self.last_error,
            "scrapes": len(points),
        }
