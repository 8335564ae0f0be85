"""The broker's metrics: the counters the request path adds to, and what a scrape reads.

:class:`BrokerMetrics` exists only when the broker serves metrics (``metrics.port``); without it the
request path has nothing to count and pays nothing but an ``is None`` check. :meth:`BrokerMetrics.collect`
runs on the broker's event loop (the endpoint's thread hands it over, see ``endpoint``), between
requests, so it reads every structure as the request path left it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client.core import Metric

from onceflow.broker.metrics.coordinator_logs import CoordinatorLogs
from onceflow.broker.metrics.families import Families, jmx
from onceflow.broker.metrics.groups import collect_groups
from onceflow.broker.metrics.partitions import ReplicaStats, collect_partitions
from onceflow.broker.metrics.raft import collect_controller, collect_metadata_replay, collect_quorum
from onceflow.broker.metrics.request_stats import RequestStats
from onceflow.broker.metrics.topic_stats import BrokerTopicStats
from onceflow.broker.metrics.transactions import collect_transactions

log = logging.getLogger(__name__)

# Kafka's BrokerState values.
BROKER_STARTING = 1
BROKER_RUNNING = 3


class BrokerMetrics:
    def __init__(self) -> None:
        self.topics = BrokerTopicStats()  # the Produce and Fetch handlers add to it
        self.requests = RequestStats()  # the connections and the handler table add to it
        self.replicas = ReplicaStats()  # replication adds ISR changes to it
        self.coordinator_logs = CoordinatorLogs()
        # The node this broker is a role of (``server.node.Node``, set by it): its ``node_id``, its
        # metadata ``quorum``, its controller's ``runner`` (None without that role) and its broker's
        # replayed ``metadata`` (None without that role), all read at scrape time.
        self.node: Any = None

    def started(self, topics: Any) -> None:
        """The broker is about to serve: the coordinators' events count from here."""
        self.coordinator_logs.start(topics)

    def collect(self, broker: Any) -> list[Metric]:
        """Every family of the node's own metrics (the process's are the endpoint's). Each part that
        fails is left out, logged, and the rest still reported."""
        families = Families()
        services = broker.services
        node = self.node
        metadata = getattr(node, "metadata", None)
        is_broker = node is None or node.server.is_broker  # a controller-only node has none of these
        if is_broker:
            self._part("requests", self.requests.collect, families)
        if services is not None:
            config = services.config
            topics = services.topics
            wall_ms = int(time.time() * 1000)
            txn_timeout = config.transaction_max_timeout_ms
            self._part("topics", self.topics.collect, families, topics)
            self._part("partitions", collect_partitions, families, topics, wall_ms, txn_timeout, metadata)
            self._part("replicas", self.replicas.collect, families)
            # The coordinators' read-only entry points (those of ListGroups, OffsetFetch, DescribeGroups,
            # ListTransactions and DescribeTransactions).
            self._part("groups", collect_groups, families, services.groups.coordinator, topics)
            self._part(
                "transactions",
                collect_transactions,
                families,
                services.transactions.coordinator,
                topics,
                wall_ms,
                txn_timeout,
            )
            self._part("coordinator logs", self.coordinator_logs.collect, families, topics)
        if is_broker:
            families.gauge(
                jmx("server", "KafkaServer", "BrokerState"),
                "The broker's state (1: starting, 3: running).",
                BROKER_RUNNING if services is not None else BROKER_STARTING,
            )
        if metadata is not None:
            self._part("metadata replay", collect_metadata_replay, families, metadata)
        if node is not None and node.runner is not None:
            self._part("controller", collect_controller, families, node.runner.controller)
        if node is not None and node.quorum is not None:
            self._part("quorum", collect_quorum, families, node.quorum, node.node_id)
        if is_broker:
            self._part("limits", _collect_limits, families, broker)
        return list(families)

    @staticmethod
    def _part(what: str, collect: Any, *args: Any) -> None:
        try:
            collect(*args)
        except Exception:
            log.exception("metrics: collecting the %s failed; the scrape goes on without them", what)


def _collect_limits(families: Families, broker: Any) -> None:
    """The limits of the overload work: what bit how often, request memory, connections."""
    for kind, n in sorted(broker.limit_events.counts.items()):
        families.counter(
            "onceflow_broker_limit_events",
            "Times a broker limit bit (connections refused, memory full, requests throttled), per kind.",
            n,
            {"kind": kind},
        )
    pool = broker.memory_pool
    if pool is not None and pool.capacity > 0:
        families.gauge(
            jmx("network", "SocketServer", "MemoryPoolAvailable"),
            "Bytes of queued.max.request.bytes free.",
            pool.capacity - pool.used,
        )
        families.gauge(
            jmx("network", "SocketServer", "MemoryPoolUsed"),
            "Bytes of queued.max.request.bytes in use.",
            pool.used,
        )
    families.gauge(
        "kafka_server_socket_server_metrics_connection_count",
        "Client connections open.",
        broker.connection_limits.open,
        {"listener": "PLAINTEXT"},
    )
