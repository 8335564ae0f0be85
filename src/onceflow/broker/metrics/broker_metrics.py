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
from onceflow.broker.metrics.partitions import collect_partitions
from onceflow.broker.metrics.raft import collect_raft
from onceflow.broker.metrics.request_stats import RequestStats
from onceflow.broker.metrics.topic_stats import BrokerTopicStats
from onceflow.broker.metrics.transactions import collect_transactions

log = logging.getLogger(__name__)

BROKER_STATE_RUNNING = 3  # Kafka's BrokerState.RUNNING


class BrokerMetrics:
    def __init__(self) -> None:
        self.topics = BrokerTopicStats()  # the Produce and Fetch handlers add to it
        self.requests = RequestStats()  # the connections and the handler table add to it
        self.coordinator_logs = CoordinatorLogs()
        # The node's metadata quorum (a RaftServer) on a cluster node: its raft metrics, and the
        # active controller is whichever node leads it. None on a single broker, its own controller.
        self.quorum: Any = None

    def started(self, topics: Any) -> None:
        """The broker is about to serve: the coordinators' events count from here."""
        self.coordinator_logs.start(topics)

    def collect(self, broker: Any) -> list[Metric]:
        """Every family of the broker's own metrics (the process's are the endpoint's). Each part that
        fails is left out, logged, and the rest still reported."""
        families = Families()
        services = broker.services
        self._part("requests", self.requests.collect, families)
        if services is not None:
            config = services.config
            topics = services.topics
            wall_ms = int(time.time() * 1000)
            txn_timeout = config.transaction_max_timeout_ms
            self._part("topics", self.topics.collect, families, topics)
            self._part("partitions", collect_partitions, families, topics, wall_ms, txn_timeout)
            if services.groups is not None:
                # The coordinator's read-only entry points (behind a GroupService on the coordinator runtime).
                groups = getattr(services.groups, "coordinator", services.groups)
                self._part("groups", collect_groups, families, groups, topics)
            if services.transactions is not None:
                coordinator = services.transactions.coordinator
                self._part(
                    "transactions", collect_transactions, families, coordinator, topics, wall_ms, txn_timeout
                )
            self._part("coordinator logs", self.coordinator_logs.collect, families, topics)
            self._part("controller", _collect_controller, families, topics, self.quorum is None)
        if self.quorum is not None:
            self._part("quorum", collect_raft, families, self.quorum)
        self._part("limits", _collect_limits, families, broker)
        return list(families)

    @staticmethod
    def _part(what: str, collect: Any, *args: Any) -> None:
        try:
            collect(*args)
        except Exception:
            log.exception("metrics: collecting the %s failed; the scrape goes on without them", what)


def _collect_controller(families: Families, topics: Any, single_node: bool) -> None:
    """A single onceflow broker is also its cluster's controller (Kafka's combined mode); on a
    cluster node, whether it is the active controller is the quorum's to say (``raft``)."""
    n_topics = n_partitions = 0
    for topic in topics:
        n_topics += 1
        n_partitions += len(topic.partitions)
    controller = (
        ("ActiveBrokerCount", 1, "Brokers registered and not fenced."),
        ("FencedBrokerCount", 0, "Brokers registered and fenced."),
        ("GlobalTopicCount", n_topics, "Topics in the cluster."),
        ("GlobalPartitionCount", n_partitions, "Partitions in the cluster."),
        ("OfflinePartitionsCount", 0, "Partitions without a leader."),
        ("PreferredReplicaImbalanceCount", 0, "Partitions not led by their preferred replica."),
    )
    if single_node:
        families.gauge(
            jmx("controller", "KafkaController", "ActiveControllerCount"),
            "1 on the node that is the active controller.",
            1,
        )
    for name, value, meaning in controller:
        families.gauge(jmx("controller", "KafkaController", name), meaning, value)
    families.gauge(
        jmx("server", "KafkaServer", "BrokerState"), "The broker's state (3: running).", BROKER_STATE_RUNNING
    )


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
