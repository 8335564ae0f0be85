"""One onceflow process: a node with the broker role, the controller role, or both (Kafka's
``KafkaRaftServer`` with its ``BrokerServer`` and ``ControllerServer``).

Start order (each step needs the one before):

1. lock the data dir, read its identity (``meta.properties``: the cluster id);
2. bind the broker's listeners (their ports are what it registers) and start the metadata quorum;
   the controller, if this node has that role, replays the log and becomes active when its node
   leads (bootstrapping an empty log: ``metadata.version``, and a single-node data dir's topics);
3. register the broker with the active controller, replay the metadata up to that registration,
   open the logs the image gives this broker, and heartbeat until the controller unfences it (it
   then leads its partitions);
4. start the broker's services (the coordinators replay their topics) and accept clients: the
   "onceflow broker listening on" line.

Stop (SIGTERM, Ctrl-C): a broker of a cluster first shuts down under control (its leaderships move
to other brokers, bounded by ``controlled.shutdown`` time), then stops accepting and closes its logs;
the controller and the quorum stop last. A single node has nobody to hand over to and stops at once.

With ``metrics.port`` set, every node serves its own Prometheus ``/metrics`` (``broker.metrics``):
its broker's, its controller's and its quorum's, from the moment its data dir is locked.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import logging
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from onceflow.broker.cluster_metadata import ClusterMetadata, ImageAclStore, ImageScramStore
from onceflow.broker.config import BrokerConfig
from onceflow.broker.data_dir_lock import DataDirLock, lock_data_dir
from onceflow.broker.metrics import serve_metrics
from onceflow.broker.server import Broker
from onceflow.controller.config import ControllerConfig
from onceflow.controller.quorum_controller import QuorumController
from onceflow.metadata.records import RESOURCE_TOPIC
from onceflow.server.broker_lifecycle import BrokerLifecycle
from onceflow.server.cluster_authorization import inter_broker_warning
from onceflow.server.config import Listener, ServerConfig, server_config
from onceflow.server.controller_channel import ControllerChannel
from onceflow.server.controller_listener import ControllerListener
from onceflow.server.controller_runner import ControllerRunner
from onceflow.server.metadata_snapshots import MetadataSnapshots
from onceflow.server.migration import retire_single_node_files, single_node_records
from onceflow.server.peer_connections import PeerConnections
from onceflow.server.producer_id_blocks import ControllerProducerIds
from onceflow.server.quorum import LocalQuorum
from onceflow.server.replication import NodeReplication
from onceflow.server.security import NodeSecurity, node_security, stream_connector
from onceflow.server.topic_admin import AsyncTopicAdmin, LocalTopicAdmin
from onceflow.server.txn_markers import ClusterMarkerWriter
from onceflow.server.txn_router import TransactionRouter

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0


def topic_config_validator(resource_type: int, name: str, configs: Mapping[str, str]) -> str | None:
    """The controller's check of a topic's configs: the log's own (``LogConfig``)."""
    if resource_type != RESOURCE_TOPIC:
        return None
    from onceflow.log.config import LogConfig
    from onceflow.protocol.errors import KafkaError

    try:
        LogConfig.from_topic_configs(dict(configs))
    except KafkaError as exc:
        return str(exc)
    return None


def derived_cluster_id(voters: Mapping[int, tuple[str, int]]) -> str:
    """A cluster id every node of a quorum computes alike from ``controller.quorum.voters``, for a
    cluster whose nodes were not given ``cluster.id``."""
    text = ",".join(f"{node}@{host}:{port}" for node, (host, port) in sorted(voters.items()))
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:16]).decode().rstrip("=")


class Node:
    def __init__(
        self,
        server: ServerConfig,
        broker_config: BrokerConfig,
        *,
        log_opener: Callable[..., Any] | None = None,
        quorum_factory: Callable[[Node, str], Any] | None = None,
    ) -> None:
        """``quorum_factory(node, cluster_id)``: the metadata quorum to run on instead of the one the
        config calls for (tests: an in-process quorum shared by several nodes)."""
        self.server = server
        # One node id for both roles (the broker's answers name it too).
        self.config = dataclasses.replace(broker_config, node_id=server.node_id)
        if server.single_node:
            # A cluster of one broker keeps its internal topics on it (Kafka's single-broker setting).
            self.config.offsets_topic_replication_factor = 1
            self.config.transaction_state_log_replication_factor = 1
        self.node_id = server.node_id
        self.data_dir = Path(self.config.data_dir)
        self._lock: DataDirLock | None = None
        self.broker: Broker | None = None
        self.quorum: Any = None
        self.runner: ControllerRunner | None = None
        self.metadata: ClusterMetadata | None = None
        self.channel: ControllerChannel | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.controller_listener: ControllerListener | None = None
        self.peers: PeerConnections | None = None  # to other brokers' inter-broker listener
        self.controller_peers: PeerConnections | None = None  # to the controllers' listener
        self.security: NodeSecurity | None = None
        self.replication: NodeReplication | None = None
        self.metrics_endpoint: Any = None  # broker.metrics' endpoint, when metrics.port is set
        self._log_opener = log_opener
        self._quorum_factory = quorum_factory
        self._own_broker_registered = False
        self._migrated = False
        self._pending_bootstrap: list = []

    @property
    def port(self) -> int:
        """The first broker listener's bound port (0 until bound)."""
        return self.broker.port if self.broker is not None and self.broker.bound else 0

    @property
    def topics(self) -> Any:
        return self.broker.topics

    @property
    def services(self) -> Any:
        return self.broker.services if self.broker is not None else None

    @property
    def faults(self) -> Any:
        return self.broker.faults

    # ------------------------------------------------------------ start

    async def start(self) -> None:
        self._lock = lock_data_dir(self.data_dir)  # raises DataDirInUse
        try:
            await self._start()
        except BaseException:
            await self._stop_parts()
            raise

    async def _start(self) -> None:
        server, config = self.server, self.config
        broker_listeners = server.broker_listeners()
        # ConfigError: a setting that cannot work, or what a cluster cannot do yet.
        security = self.security = node_security(server, config.security)
        broker_config = config
        if security.broker_properties != config.security:  # without the controller listener's own
            broker_config = dataclasses.replace(config, security=dict(security.broker_properties))
        self.broker = Broker(
            broker_config,
            log_opener=self._log_opener,
            listeners=[(lst.name, lst.host, lst.port) for lst in broker_listeners],
            protocols={lst.name: lst.security_protocol for lst in broker_listeners},
        )
        # A cluster's brokers keep no SCRAM credentials of their own (server.security).
        self.broker.keeps_credentials = server.single_node
        to_brokers = security.to_brokers
        warning = (
            inter_broker_warning(server, self.broker.security, getattr(to_brokers, "sasl_username", None))
            if server.is_broker
            else None
        )
        if warning is not None:
            log.warning("node %d: %s", self.node_id, warning)
        if self.broker.metrics is not None:
            # First: a metrics port that cannot be bound stops the start at once. What is not there
            # yet (the quorum, the broker's services) is left out of a scrape until it is.
            self.broker.metrics.node = self
            self.metrics_endpoint = serve_metrics(self.broker)
        topics = self.broker.topics
        wanted = None if server.single_node else (server.cluster_id or derived_cluster_id(server.voters))
        topics.load_identity(wanted)
        cluster_id = topics.cluster_id
        # Read before the quorum runs: a damaged single-node file stops the start, naming it.
        self._pending_bootstrap = (
            single_node_records(self.data_dir, self.node_id, security=not server.single_node)
            if server.is_controller
            else []
        )
        self.quorum = self._make_quorum(cluster_id)
        if server.is_controller:
            self.runner = ControllerRunner(
                QuorumController(self._controller_config(cluster_id)),
                self.quorum,
                bootstrap_records=self._bootstrap_records,
                on_activate=self._on_activate,
            )
            self.quorum.add_listener(self.runner)
        client_id = f"onceflow-node-{self.node_id}"
        self.peers = PeerConnections(client_id, security.to_brokers)
        self.controller_peers = PeerConnections(client_id, security.to_controllers)
        self.channel = ControllerChannel(self.quorum, self.runner, self.controller_peers.send)
        if server.is_broker:
            self.metadata = ClusterMetadata(
                self.node_id, topics, on_partitions_deleted=self._partitions_deleted
            )
            self.quorum.add_listener(self.metadata)
            self.broker.metadata = self.metadata
            self.broker.controller = self.channel
            self.replication = NodeReplication(self)
            self.metadata.on_image = self.replication.on_image
            self.broker.replication = self.replication.service
            # With a metadata log on disk, topics.json is only read, once (a single-node data dir).
            topics.persist_topics_file = not self.durable
            if server.single_node:
                topics.admin = LocalTopicAdmin(self.runner, self.quorum)
            else:
                topics.admin = AsyncTopicAdmin(
                    self.channel,
                    {
                        "__transaction_state": {
                            "min.insync.replicas": str(config.transaction_state_log_min_isr)
                        }
                    },
                    {
                        "__consumer_offsets": config.offsets_topic_replication_factor,
                        "__transaction_state": config.transaction_state_log_replication_factor,
                    },
                )
            await self.broker.bind()
        if self.durable:
            self.quorum.add_listener(MetadataSnapshots(self.quorum, self._snapshot_image))
        if self.runner is not None:
            own = server.controller_listener()
            self.controller_listener = ControllerListener(
                self.runner,
                self.quorum,
                own.host,
                own.port,
                quorum_apis=self.quorum.served_apis(),
                security=security.controller_listener,
            )
            await self.controller_listener.start()
        await self.quorum.start()
        if self.runner is not None:
            self.runner.start()
        if server.is_broker:
            await self._start_broker(cluster_id, broker_listeners)

    async def _start_broker(self, cluster_id: str, broker_listeners) -> None:
        server = self.server
        advertised = self._advertised(broker_listeners)
        self.lifecycle = BrokerLifecycle(
            self.node_id,
            cluster_id,
            self.channel,
            self.metadata,
            advertised,
            heartbeat_interval_ms=server.broker_heartbeat_interval_ms,
            quorum_hint=f"controller.quorum.voters: {len(server.voters)} voters, "
            f"{len(server.voters) // 2 + 1} needed",
        )
        epoch = await self.lifecycle.register()
        self._own_broker_registered = True
        self.replication.set_broker_epoch(epoch)
        self.replication.service.start()
        await self.metadata.wait_for_offset(epoch)
        self.metadata.start_publishing()
        self.lifecycle.start_heartbeats()
        await self.lifecycle.wait_unfenced()
        # Unfenced: the controller has made this broker the leader of its partitions; serve once
        # this broker's own image says so too.
        await self.metadata.wait_until(lambda image: not image.broker(self.node_id).fenced, 30.0)
        if self.durable or not server.single_node:
            # Producer ids from the controller's blocks (a single node without a metadata log on disk
            # keeps its producer-id-block.json instead).
            producer_ids = ControllerProducerIds(
                self.channel, self.node_id, lambda: self.lifecycle.broker_epoch
            )
            await producer_ids.start()
            self.broker._producer_ids = producer_ids  # noqa: SLF001 - set before its services exist
        if self._migrated and self.durable:
            retire_single_node_files(self.data_dir, security=not server.single_node)
        if not server.single_node:
            self.broker.quota_store = self.metadata.quota_store()
            self.metadata.on_quotas = self._quotas_changed
            # ACLs and SCRAM credentials are the image's too (the controller writes them).
            self.broker.acl_store = ImageAclStore(self.metadata)
            self.broker.scram_store = ImageScramStore(self.metadata)
            self.metadata.on_acls = self._acls_changed
            self.metadata.on_scram_credentials = self._scram_credentials_changed
            self.broker.wrap_markers = lambda local: ClusterMarkerWriter(
                local,
                self.metadata,
                self.node_id,
                server.inter_broker_listener_name,
                self.peers,
                self.broker.faults,
            )
            self.broker.txn_router = TransactionRouter(
                self.metadata, self.node_id, server.inter_broker_listener_name, self.peers
            )
            # Coordinators serve the internal-topic partitions this broker leads, and follow them.
            self.broker.coordinator_failover = self.replication.coordinators
        await self.broker.start_services({lst.name: (lst.host, lst.port) for lst in advertised})
        await self.broker.serve()

    def _make_quorum(self, cluster_id: str):
        if self._quorum_factory is not None:
            return self._quorum_factory(self, cluster_id)
        from onceflow.server.raft_quorum import QuorumUnavailable, raft_quorum

        connect = stream_connector(self.security.to_controllers, f"raft-{self.node_id}")
        try:
            return raft_quorum(self.server, self.data_dir, cluster_id, connect)
        except QuorumUnavailable:
            if not self.server.single_node:
                raise
            return LocalQuorum(self.node_id)  # a build without the Raft package

    @property
    def durable(self) -> bool:
        """Whether the metadata log is on disk (the Raft quorum), not rebuilt at each start."""
        return bool(getattr(self.quorum, "durable", False))

    def _bootstrap_records(self) -> list:
        """An empty metadata log's first records: a single-node data dir's topics and producer ids."""
        records = self._pending_bootstrap
        self._migrated = bool(records)
        return records

    def _snapshot_image(self):
        """What this node's snapshots hold: the controller's committed image, else the broker's."""
        if self.runner is not None:
            controller = self.runner.controller
            return controller.committed_offset + 1, controller.committed_image
        return self.metadata.offset + 1, self.metadata.image

    def _controller_config(self, cluster_id: str) -> ControllerConfig:
        server, config = self.server, self.config
        return ControllerConfig(
            node_id=self.node_id,
            cluster_id=cluster_id,
            broker_session_timeout_ms=server.broker_session_timeout_ms,
            num_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            auto_leader_rebalance_enable=server.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=server.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=server.leader_imbalance_per_broker_percentage,
            metadata_max_idle_interval_ms=server.metadata_max_idle_interval_ms,
            config_validator=topic_config_validator,
        )

    def _advertised(self, broker_listeners: tuple[Listener, ...]) -> list[Listener]:
        """Each broker listener as clients reach it: its advertised host and port, the bound port for
        a listener on port 0, and a concrete host for one on every interface."""
        assert self.broker is not None
        result = []
        for listener in broker_listeners:
            advertised = self.server.advertised(listener.name) or listener
            host, bound_port = self.broker.bound[listener.name]
            port = advertised.port or bound_port
            if advertised.host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1" if advertised.host == "" else advertised.host
            else:
                host = advertised.host
            result.append(Listener(listener.name, host, port, listener.security_protocol))
        return result

    def _on_activate(self, controller: QuorumController) -> None:
        # This process's broker has not registered yet, so any registration of this node id in the
        # image is an earlier incarnation that is gone: no session to wait out before replacing it.
        if not self._own_broker_registered and controller.sessions is not None:
            controller.sessions.fence(self.node_id)

    def _quotas_changed(self, quotas) -> None:
        services = self.broker.services if self.broker is not None else None
        if services is not None:
            services.quotas.replace(quotas)

    def _acls_changed(self, acls) -> None:
        services = self.broker.services if self.broker is not None else None
        if services is not None and services.authorizer is not None:
            services.authorizer.replace(acls.values())

    def _scram_credentials_changed(self, credentials) -> None:
        services = self.broker.services if self.broker is not None else None
        if services is not None and services.scram is not None:
            services.scram.replace(credentials)

    def _partitions_deleted(self, partitions) -> None:
        services = self.broker.services if self.broker is not None else None
        if services is not None:
            services.groups.on_partitions_deleted(partitions)

    # ------------------------------------------------------------ stop

    async def stop(self) -> None:
        if self.lifecycle is not None and not self.server.single_node and self.lifecycle.broker_epoch >= 0:
            await self.lifecycle.controlled_shutdown(
                CONTROLLED_SHUTDOWN_TIMEOUT_S, self.server.broker_session_timeout_ms / 1000.0
            )
        await self._stop_parts()

    async def _stop_parts(self) -> None:
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        if self.lifecycle is not None:
            await self.lifecycle.stop()
        if self.replication is not None:
            with contextlib.suppress(Exception):
                await self.replication.service.stop()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                await self.broker.stop()
        producer_ids = getattr(self.broker, "_producer_ids", None)
        if isinstance(producer_ids, ControllerProducerIds):
            await producer_ids.stop()
        if self.runner is not None:
            await self.runner.stop()
        if self.controller_listener is not None:
            await self.controller_listener.stop()
        if self.quorum is not None:
            await self.quorum.stop()
        for peers in (self.peers, self.controller_peers):
            if peers is not None:
                await peers.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def single_node(
    config: BrokerConfig,
    *,
    log_opener: Callable[..., Any] | None = None,
    quorum_factory: Callable[[Node, str], Any] | None = None,
) -> Node:
    """The node plain ``onceflow serve`` runs: one broker on ``config.host``/``config.port`` that is
    its own controller."""
    return Node(
        server_config({"node.id": str(config.node_id)}, host=config.host, port=config.port),
        config,
        log_opener=log_opener,
        quorum_factory=quorum_factory,
    )


async def _serve_until_signalled(server: ServerConfig, config: BrokerConfig) -> None:
    # Signal handlers first: a SIGTERM right after the "listening" line must still stop us cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        node = Node(server, config)
        await node.start()
        try:
            await stop.wait()
            log.info("signal received, shutting down")
        finally:
            await node.stop()
    finally:
        # Put the process's own handlers back (uvloop leaves its own installed otherwise), so a
        # caller that goes on after a failed start, such as a test invoking the CLI, keeps Ctrl-C.
        for sig in signals:
            loop.remove_signal_handler(sig)


def run(server: ServerConfig | None, config: BrokerConfig) -> None:
    """Run a node until SIGTERM/SIGINT, on uvloop where installed."""
    from onceflow.broker.malloc_tuning import keep_freed_memory_for_reuse
    from onceflow.broker.open_files import raise_open_file_limit

    if server is None:
        server = server_config({}, host=config.host, port=config.port)
    keep_freed_memory_for_reuse()  # this is the broker's own process
    raise_open_file_limit()  # one descriptor per partition's open segment, besides the connections
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve_until_signalled(server, config))
    else:
        uvloop.run(_serve_until_signalled(server, config))
