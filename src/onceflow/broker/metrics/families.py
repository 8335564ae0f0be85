"""Naming and building the metric families a scrape returns.

Names are what the Prometheus JMX exporter makes of Kafka's MBeans with its standard Kafka rules
(``example_configs/kafka-2_0_0.yml``, ``lowercaseOutputName: true``), so that dashboards and alerts
written for a Kafka broker read these too:

- a meter ``kafka.<domain>:type=<Type>,name=<Name>PerSec[,k=v...]`` is the counter
  ``kafka_<domain>_<type>_<name>_total`` with the key properties as labels
  (``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` ->
  ``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``);
- a gauge ``...name=<Name>`` is the gauge ``kafka_<domain>_<type>_<name>``;
- a histogram ``...name=<Name>`` keeps its name; its ``_count`` is the exporter's (see ``histogram``).

Kafka's newer metrics (``org.apache.kafka.common.metrics``: ``kafka.server:type=group-coordinator-metrics``
and the like) match no standard rule; they get the name the exporter gives a bean with no rule
(:func:`exporter_default`), untyped, as the exporter reports them. What onceflow adds with no Kafka
counterpart is named like a Kafka bean of the same kind would be, or starts with ``onceflow_``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from prometheus_client.core import HistogramMetricFamily, Metric

from onceflow.broker.metrics.histogram import Histogram

_PER_SEC = "PerSec"
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")


def jmx(domain: str, bean_type: str, name: str) -> str:
    """The standard rules' name of ``kafka.<domain>:type=<bean_type>,name=<name>`` (without the
    ``_total`` a counter's samples add): ``jmx("server", "BrokerTopicMetrics", "BytesInPerSec")`` is
    ``kafka_server_brokertopicmetrics_bytesin``."""
    if name.endswith(_PER_SEC):
        name = name[: -len(_PER_SEC)]
    return f"kafka_{domain}_{bean_type}_{name}".replace(".", "_").lower()


def exporter_default(domain: str, bean_type: str, attribute: str) -> str:
    """What the exporter calls attribute ``attribute`` of ``kafka.<domain>:type=<bean_type>`` when no rule
    matches: ``exporter_default("server", "group-coordinator-metrics", "offset-commit-count")`` is
    ``kafka_server_group_coordinator_metrics_offset_commit_count``."""
    return _NOT_NAME.sub("_", f"kafka_{domain}_{bean_type}_{attribute}").lower()


class Families:
    """The families of one scrape, built sample by sample (several samples may share a family)."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def _family(self, name: str, documentation: str, kind: str) -> Metric:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Metric(name, documentation, kind)
        return family

    def counter(
        self, name: str, documentation: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        self._family(name, documentation, "counter").add_sample(name + "_total", dict(labels or {}), value)

    def gauge(
        self, name: str, documentation: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        self._family(name, documentation, "gauge").add_sample(name, dict(labels or {}), value)

    def untyped(
        self, name: str, documentation: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        self._family(name, documentation, "unknown").add_sample(name, dict(labels or {}), value)

    def declare(self, name: str, documentation: str, kind: str) -> None:
        """A family that is listed (with its help and type) even when it has no sample yet."""
        self._family(name, documentation, kind)

    def histogram(
        self, name: str, documentation: str, histogram: Histogram, labels: Mapping[str, str] | None = None
    ) -> None:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = HistogramMetricFamily(name, documentation)
        labels = dict(labels or {})
        for le, count in histogram.cumulative():
            family.add_sample(name + "_bucket", {**labels, "le": le}, count)
        family.add_sample(name + "_count", labels, histogram.count)
        family.add_sample(name + "_sum", labels, histogram.sum)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())

    def names(self) -> list[str]:
        return list(self._families)
