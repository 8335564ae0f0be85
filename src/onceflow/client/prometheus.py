"""Client metrics for Prometheus, through the ``prometheus_client`` library (the ``metrics`` extra).

Names are what the Prometheus JMX exporter's default rules make of a Java client's MBeans, so
dashboards built for Java producers and consumers read ours: the domain (``kafka.producer`` /
``kafka.consumer``), the group (the MBean type) and the metric name, joined and with ``_`` for
``-``; tags become labels. ``record-send-total`` of a producer with client id ``p1`` is::

    kafka_producer_producer_metrics_record_send_total{client_id="p1"} 1000.0

``-total`` metrics are counters, the rest gauges. Usage::

    from onceflow.client.prometheus import serve_metrics
    server = serve_metrics(9400, producer, consumer)   # http://127.0.0.1:9400/metrics
    ...
    server.shutdown()

or ``registry.register(ClientCollector(producer))`` to add them to a registry of your own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.metrics_core import Metric
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "serving client metrics to Prometheus needs prometheus_client: pip install 'onceflow[metrics]'"
    ) from exc


def prometheus_name(group: str, name: str) -> str:
    """``producer-metrics`` + ``record-send-total`` -> ``kafka_producer_producer_metrics_record_send_total``."""
    domain = "kafka_consumer" if group.startswith("consumer") else "kafka_producer"
    return f"{domain}_{group}_{name}".replace("-", "_").replace(".", "_")


class ClientCollector:
    """A ``prometheus_client`` collector reading ``metrics()`` of producers and consumers (async or
    blocking) at each scrape."""

    def __init__(self, *clients) -> None:
        self._clients = list(clients)

    def add(self, client) -> None:
        self._clients.append(client)

    def remove(self, client) -> None:
        self._clients.remove(client)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for client in list(self._clients):
            for metric, value in client.metrics().items():
                counter = metric.name.endswith("-total")
                full = prometheus_name(metric.group, metric.name)
                family = families.get(full)
                if family is None:
                    family = families[full] = Metric(
                        full, f"{metric.group} {metric.name}", "counter" if counter else "gauge"
                    )
                labels = {key.replace("-", "_"): str(tag) for key, tag in metric.tags}
                if counter and math.isnan(value):
                    continue
                family.add_sample(full, labels, value)
        yield from families.values()


def serve_metrics(port: int, *clients, addr: str = "127.0.0.1"):
    """Serve the clients' metrics at ``http://addr:port/metrics`` from a daemon thread; returns the
    HTTP server (``shutdown()`` it to stop). Port 0 picks a free one: ``server.server_port``."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ClientCollector(*clients))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server
