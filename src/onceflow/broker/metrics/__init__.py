"""The broker's Prometheus metrics (``metrics.port`` / ``onceflow serve --metrics-port``).

Kafka's MBeans under the names the JMX exporter's standard Kafka rules give them (``families``),
so that Kafka dashboards and alerts read a onceflow broker: BrokerTopicMetrics (``topic_stats``),
RequestMetrics (``request_stats``), ReplicaManager, Log and Partition (``partitions``), the group
coordinator and consumer lag (``groups``), the transaction coordinator (``transactions``), the
coordinators' events (``coordinator_logs``), the controller, the limits, and the process.

Only a few lines of the broker count anything (the connection times requests, the handler table
counts error codes, Produce and Fetch count per topic); everything else is read at scrape time from
the state the broker keeps anyway. The modules that need ``prometheus_client`` (the ``metrics``
extra) are imported only when metrics are switched on, by the two functions the broker calls.
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.metrics.errors import MetricsEndpointError

__all__ = ["MetricsEndpointError", "new_broker_metrics", "serve_metrics"]


def new_broker_metrics() -> Any:
    """The counters of a broker that serves metrics (a ``BrokerMetrics``)."""
    try:
        from onceflow.broker.metrics.broker_metrics import BrokerMetrics
    except ImportError as exc:
        raise MetricsEndpointError(
            f"metrics.port needs prometheus_client ({exc}): pip install 'onceflow[metrics]'"
        ) from exc
    return BrokerMetrics()


def serve_metrics(broker: Any) -> Any:
    """Serve ``broker``'s metrics at ``http://metrics.host:metrics.port/metrics`` (the broker's host
    unless ``metrics.host`` says otherwise); returns the endpoint (``stop()`` it). Raises
    :class:`MetricsEndpointError` when the port cannot be bound. Call on the broker's event loop."""
    from onceflow.broker.metrics.endpoint import MetricsEndpoint

    config = broker.config
    endpoint = MetricsEndpoint(
        config.metrics_host or config.host, config.metrics_port, lambda: broker.metrics.collect(broker)
    )
    endpoint.start()
    return endpoint
