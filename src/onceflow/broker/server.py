"""The asyncio broker: accepts connections, frames requests, dispatches them to handlers, answers in order.

Each accepted connection is a ``client_protocol.ClientProtocol``: it reads straight into the sans-IO
``Connection`` and runs ``Broker._dispatch`` for each request as soon as it is read, up to the
handler's first suspension (a handler that suspends, such as a long-polling Fetch, goes on in a task
and never delays other connections); answers are written in request order (Kafka's contract).
Handlers start in request order, and handlers that change state (Produce) do so before their first
``await``, so appends also happen in request order.

A handler returning ``None`` sends no response (acks=0 produce, dropped-response fault): later
responses still go out in order.

A broker is one role of a node (``onceflow.server.node``): the node locks the data dir, replays the
metadata into the broker's ``ClusterMetadata`` and registers it with the controller, then calls
:meth:`Broker.bind`, :meth:`Broker.start_services` and :meth:`Broker.serve` in that order. Each
listener (``listeners``: name, host, port, with its security protocol) is a server of its own, with
TLS where its protocol says so (``broker/security``); every connection has a ``Session`` (listener,
client address, principal) that its requests' contexts carry, so that handlers authorize the
principal and answers name every broker's endpoint on the listener the request came in on.

With ``metrics.port`` set the broker counts for Prometheus (``broker/metrics``; the node serves
``/metrics``): the connections time requests, the handler table counts answers' error codes, Produce
and Fetch count per topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onceflow.broker.client_protocol import Answer, ClientProtocol
from onceflow.broker.config import BrokerConfig
from onceflow.broker.connection import RequestReceived, SupportedApi
from onceflow.broker.connection_limits import ConnectionLimits, parse_per_ip_overrides
from onceflow.broker.context import BrokerServices, RequestContext
from onceflow.broker.faults import Faults
from onceflow.broker.fetch_session import FetchSessionCache
from onceflow.broker.group.service import start_group_coordinator
from onceflow.broker.handlers import HANDLERS
from onceflow.broker.idle_connections import close_idle_connections
from onceflow.broker.limit_events import LimitEvents
from onceflow.broker.log_cleaner import LogCleaner
from onceflow.broker.memory_pool import MemoryPool
from onceflow.broker.metrics import new_broker_metrics
from onceflow.broker.producer_expiry import run_producer_expiry
from onceflow.broker.quotas.manager import ClientQuotas
from onceflow.broker.quotas.store import FileQuotaStore
from onceflow.broker.quotas.throttling import answer_within_quotas
from onceflow.broker.security.acl_store import AclStore, FileAclStore
from onceflow.broker.security.authorizer import StandardAuthorizer
from onceflow.broker.security.config import ListenerSecurity, security_config
from onceflow.broker.security.credentials import FileScramStore, ScramCredentials, ScramStore
from onceflow.broker.security.sasl_authenticator import SaslAuthenticator
from onceflow.broker.security.session import Session
from onceflow.broker.topics import TopicManager
from onceflow.broker.txn.pid_manager import ProducerIdManager
from onceflow.broker.txn.service import TransactionService
from onceflow.protocol import apis
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from onceflow.broker.cluster_metadata import ClusterMetadata
    from onceflow.broker.quotas.store import QuotaStore
    from onceflow.broker.replica.service import ReplicationService
    from onceflow.broker.txn.coordinator import ProducerIdSource
    from onceflow.broker.txn.markers import MarkerWriter
    from onceflow.server.controller_channel import ControllerChannel
    from onceflow.server.coordinator_failover import CoordinatorFailover
    from onceflow.server.txn_router import TransactionRouter

log = logging.getLogger(__name__)

# A TLS client that has not finished its handshake by then is dropped (asyncio's default is 60 s).
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class Broker:
    """The broker role of a node. ``bind``, ``start_services``, ``serve`` (``port`` is then the first
    listener's bound port); ``await stop()``."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        log_opener: Callable[[Path, Mapping[str, str]], Any] | None = None,
        config_validator: Callable[[Mapping[str, str]], None] | None = None,
        listeners: Sequence[tuple[str, str, int]] | None = None,
        metadata: ClusterMetadata | None = None,
        controller: ControllerChannel | None = None,
        producer_ids: ProducerIdSource | None = None,
        protocols: Mapping[str, str] | None = None,
    ) -> None:
        """``protocols``: each listener's security protocol (listener.security.protocol.map); a
        listener it leaves out is PLAINTEXT."""
        self.config = config
        # (listener name, host, port); the first is the one logs and `port` speak of.
        self.listeners = list(listeners or [("PLAINTEXT", config.host, config.port)])
        self.metadata = metadata  # the ClusterMetadata the node replays into
        self.controller = controller  # the channel to the active controller
        self._producer_ids = producer_ids
        # A cluster node's transaction markers also go to other brokers (set by the node).
        self.wrap_markers: Callable[[MarkerWriter], MarkerWriter] | None = None
        self.txn_router: TransactionRouter | None = None  # the node's server.txn_router on a cluster
        self.replication: ReplicationService | None = None  # the node's replication on a cluster
        # A cluster node's coordinators load and unload partitions as this broker leads them (set by
        # the node); None: they own every partition (one broker).
        self.coordinator_failover: CoordinatorFailover | None = None
        # A cluster broker's client quotas come from the metadata image (set by the node).
        self.quota_store: QuotaStore | None = None
        # ACLs and SCRAM credentials: a single node's in its data dir (acls.json,
        # scram-credentials.json); a cluster broker keeps none of its own (keeps_credentials false):
        # its stores are the metadata image's (set by the node).
        self.keeps_credentials = True
        self.acl_store: AclStore | None = None
        self.scram_store: ScramStore | None = None
        self.faults = Faults(config.faults)
        self.topics = TopicManager(
            config.data_dir,
            node_id=config.node_id,
            log_opener=log_opener,
            config_validator=config_validator,
            topic_defaults=config.topic_config_defaults(),
            internal_topic_configs={
                CONSUMER_OFFSETS_TOPIC: {"segment.bytes": str(config.offsets_topic_segment_bytes)},
                TRANSACTION_STATE_TOPIC: {"segment.bytes": str(config.transaction_state_log_segment_bytes)},
            },
        )
        self.handlers = {h.API_KEY: h for h in HANDLERS}
        self.supported = {
            h.API_KEY: SupportedApi(h.API_KEY, h.MIN_VERSION, h.MAX_VERSION, h.REQUEST) for h in HANDLERS
        }
        self.services: BrokerServices | None = None
        # TLS, SASL and the authorizer of each listener (broker/security/config); ValueError naming
        # the setting that is wrong.
        self.security = security_config(config.security, self.listeners, protocols or {})
        self._servers: dict[str, asyncio.Server] = {}
        self.bound: dict[str, tuple[str, int]] = {}  # listener name -> (host, bound port)
        self._connections: set[ClientProtocol] = set()
        self._housekeeping: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._producer_expiry: asyncio.Task[None] | None = None
        self._idle_expiry: asyncio.Task[None] | None = None
        self._log_cleaner: LogCleaner | None = None
        self._log_cleaner_task: asyncio.Task[None] | None = None
        self.port = config.port
        # Every limit that bites is counted here (and logged at most once per kind per interval).
        self.limit_events = LimitEvents()
        self.memory_pool: MemoryPool | None = None  # queued.max.request.bytes; made on the loop
        self.connection_limits = ConnectionLimits(
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            per_ip_overrides=parse_per_ip_overrides(config.max_connections_per_ip_overrides),
            max_creation_rate=config.max_connection_creation_rate,
            quota_window_num=config.quota_window_num,
            quota_window_size_ms=config.quota_window_size_seconds * 1000,
        )
        self._admitted: dict[ClientProtocol, str] = {}  # connection -> its address, to release
        self.metrics: Any = None  # broker/metrics' BrokerMetrics, when metrics.port is set
        if config.metrics_port >= 0:
            self.metrics = new_broker_metrics()
            self.handlers = self.metrics.requests.instrument(self.handlers)

    async def bind(self) -> None:
        """Bind every listener, accepting nothing yet: the bound ports are what the broker registers."""
        loop = asyncio.get_running_loop()
        capacity = self.config.queued_max_request_bytes
        self.memory_pool = MemoryPool(capacity if capacity > 0 else -1, schedule=loop.call_soon)
        for listener in self.security.listeners:
            server = await loop.create_server(
                functools.partial(self._new_connection, listener),
                listener.host or None,
                listener.port,
                reuse_address=True,
                start_serving=False,
                ssl=listener.ssl_context,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if listener.ssl_context is not None else None,
            )
            self._servers[listener.name] = server
            self.bound[listener.name] = (listener.host, server.sockets[0].getsockname()[1])
        self.port = self.bound[self.listeners[0][0]][1]

    async def start_services(self, advertised: Mapping[str, tuple[str, int]] | None = None) -> None:
        """The broker's services on the logs the metadata opened: coordinators replay their topics.
        Accepting only starts with :meth:`serve`: a request served earlier would meet no services, or
        no transaction coordinator and so skip the KIP-890 produce check and TxnOffsetCommit's
        transaction check."""
        first = self.listeners[0][0]
        host, port = (advertised or self.bound)[first]
        authorizer_settings = self.security.authorizer
        failover = self.coordinator_failover
        groups = start_group_coordinator(
            self.config,
            self.topics,
            self.faults,
            owned=None if failover is None else failover.owned(CONSUMER_OFFSETS_TOPIC),
        )
        # The one producer-id allocator of this broker (InitProducerId; the transaction coordinator
        # must use this same instance, or ids could repeat).
        producer_ids = self._producer_ids or ProducerIdManager(self.config.data_dir)
        transactions = TransactionService(
            self.config, self.topics, groups, self.faults, producer_ids, wrap_markers=self.wrap_markers
        )
        if failover is not None:
            failover.attach(CONSUMER_OFFSETS_TOPIC, groups.coordinator)
            failover.attach(
                TRANSACTION_STATE_TOPIC,
                transactions.coordinator,
                after_load=lambda _partition: transactions.coordinator.retry_incomplete_transactions(),
            )
        self.services = BrokerServices(
            config=self.config,
            topics=self.topics,
            faults=self.faults,
            cluster_id=self.topics.cluster_id,
            advertised_host=host,
            advertised_port=port,
            authorizer=StandardAuthorizer(
                authorizer_settings, self.acl_store or FileAclStore(self.config.data_dir)
            )
            if authorizer_settings is not None
            else None,
            scram=self._scram_credentials(),
            security_from_metadata=self.acl_store is not None,
            fetch_sessions=FetchSessionCache(
                self.config.max_incremental_fetch_session_cache_slots,
                self.config.min_incremental_fetch_session_eviction_ms,
            ),
            producer_ids=producer_ids,
            groups=groups,
            transactions=transactions,
            quotas=ClientQuotas(
                self.quota_store or FileQuotaStore(self.config.data_dir),
                window_num=self.config.quota_window_num,
                window_size_ms=self.config.quota_window_size_seconds * 1000,
            ),
            metadata=self.metadata,
            controller=self.controller,
            txn_router=self.txn_router,
            quotas_from_metadata=self.quota_store is not None,
            replication=self.replication,
            metrics=self.metrics,
        )
        self._housekeeping = asyncio.create_task(self._run_retention(), name="retention")
        self._flusher = asyncio.create_task(self._run_flush_policy(), name="flush-policy")
        self._producer_expiry = asyncio.create_task(run_producer_expiry(self.topics), name="producer-expiry")
        if self.config.log_cleaner_enable:
            self._log_cleaner = LogCleaner(
                self.topics, self.config.log_cleaner_backoff_ms, self.config.log_cleaner_dedupe_buffer_size
            )
            self._log_cleaner_task = asyncio.create_task(self._log_cleaner.run(), name="log-cleaner")
        if self.config.connections_max_idle_ms > 0:
            self._idle_expiry = asyncio.create_task(
                close_idle_connections(lambda: self._connections, self.config.connections_max_idle_ms),
                name="idle-connections",
            )
        # Replays __transaction_state (on a cluster, the partitions this broker leads), finishes
        # Prepare* transactions.
        if failover is None:
            await transactions.start()
        else:
            await transactions.start(failover.owned(TRANSACTION_STATE_TOPIC))
        if self.metrics is not None:
            self.metrics.started(self.topics)  # the coordinators' events count from here

    async def serve(self) -> None:
        for listener in self.security.open_listeners():
            log.warning(
                "listener %s on %s:%d has no authentication and no authorizer stops anonymous clients: "
                "anyone who can reach the port can read and write everything (set "
                "listener.security.protocol.map to SASL_SSL or SSL with ssl.client.auth=required, and "
                "authorizer.class.name; see docs/security.md)",
                listener.name,
                listener.host or "0.0.0.0",
                self.bound[listener.name][1],
            )
        for server in self._servers.values():
            await server.start_serving()
        for listener in self.security.listeners:
            host, port = self.bound[listener.name]
            if listener.protocol == listener.name:  # PLAINTEXT, SSL ... named after their protocol
                log.info("onceflow broker listening on %s:%d (%s)", host or "0.0.0.0", port, listener.name)
            else:
                log.info(
                    "onceflow broker listening on %s:%d (%s, %s)",
                    host or "0.0.0.0",
                    port,
                    listener.name,
                    listener.protocol,
                )

    async def stop(self) -> None:
        """Stop accepting, drop connections, flush and close every log."""
        for server in self._servers.values():
            server.close()
        if self.coordinator_failover is not None:
            self.coordinator_failover.detach_all()  # no loads into coordinators that are stopping
        for task in (
            self._housekeeping,
            self._flusher,
            self._producer_expiry,
            self._idle_expiry,
            self._log_cleaner_task,
        ):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        # Aborting a transport cancels its connection's running requests (connection_lost).
        connections = list(self._connections)
        for connection in connections:
            connection.abort()
        if connections:
            await asyncio.wait([c.closed for c in connections], timeout=5.0)
        for server in self._servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()
        if self._log_cleaner is not None:
            self._log_cleaner.close()  # before the logs close: a build may be reading their segments
        if self.services is not None:
            await self.services.transactions.stop()
            self.services.groups.shutdown()
        self.topics.flush()
        self.topics.close()
        log.info("onceflow broker on port %d stopped", self.port)

    async def _run_retention(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            deleted = self.topics.apply_retention()
            if deleted:
                log.info("retention deleted %d segments", deleted)

    async def _run_flush_policy(self) -> None:
        """flush.ms for partitions that went quiet (an append checks it too)."""
        interval = self.config.log_flush_scheduler_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            self.topics.flush_due()

    def _scram_credentials(self) -> ScramCredentials | None:
        """The image's on a cluster broker, the data dir's on a single node (None: neither was given)."""
        if self.scram_store is not None:
            return ScramCredentials(self.scram_store)
        if self.keeps_credentials:
            return ScramCredentials(FileScramStore(self.config.data_dir))
        return None

    def _new_connection(self, listener: ListenerSecurity) -> ClientProtocol:
        session = Session(listener=listener.name, security_protocol=listener.protocol)
        sasl = listener.sasl
        authenticator = None
        if sasl is not None:
            scram = self.services.scram if self.services is not None else None
            authenticator = SaslAuthenticator(sasl, scram.lookup if scram is not None else None)
        connection = ClientProtocol(
            functools.partial(self._dispatch, session),
            self.supported,
            max_request_bytes=self.config.socket_request_max_bytes,
            on_close=self._connection_closed,
            pool=self.memory_pool,
            limit_events=self.limit_events,
            on_open=self._admit,
            session=session,
            authenticator=authenticator,
            max_unauthenticated_bytes=sasl.max_receive_size if sasl is not None else None,
            certificate_principal=listener.certificate_principal if listener.protocol == "SSL" else None,
            request_timer=self.metrics.requests if self.metrics is not None else None,
        )
        return connection

    def _admit(self, connection: ClientProtocol) -> bool:
        """Let a new connection in, or refuse it (a connection limit; see connection_limits). Called
        when the transport is made: on a TLS listener after the handshake, so a connection whose
        handshake fails (plain bytes, an untrusted certificate) is never kept or counted."""
        self._connections.add(connection)
        address = connection.peer_address
        refused = self.connection_limits.admit(address, int(time.monotonic() * 1000))
        if refused is None:
            self._admitted[connection] = address
            return True
        limits = self.connection_limits
        self.limit_events.record(
            refused,
            "refused a connection from %s (%d open from it, %d in all; limits: %d per address, %d in all, "
            "%d new per second)",
            address,
            limits.open_by_address.get(address, 0),
            limits.open,
            limits.limit_for(address),
            limits.max_connections,
            limits.max_creation_rate,
        )
        return False

    def _connection_closed(self, connection: ClientProtocol) -> None:
        self._connections.discard(connection)
        address = self._admitted.pop(connection, None)
        if address is not None:
            self.connection_limits.release(address)

    # -- requests ----------------------------------------------------------------------------------

    async def _dispatch(self, session: Session, event: RequestReceived) -> Answer:
        header = event.header
        assert self.services is not None
        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            services=self.services,
            session=session,
        )
        log.debug(
            "api %d v%d correlation %d from %s",
            header.api_key,
            header.api_version,
            header.correlation_id,
            header.client_id,
        )
        handler = self.handlers[header.api_key]
        quotas = self.services.quotas
        if quotas.any_enabled:
            return await answer_within_quotas(handler, ctx, event, quotas, self.limit_events)
        response = await handler.handle(ctx, event.request)
        if response is None:
            return None
        return apis.encode_response(response, header.correlation_id, header.api_version)
