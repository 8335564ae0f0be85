"""What the producer knows about the cluster and how it reaches it: metadata, connections, coordinators.

Leaders and partition counts come from Metadata requests (through :class:`AsyncClient`); one pipelined
:class:`Connection` per broker carries Produce requests. Transaction and group coordinators are found
with FindCoordinator (key type 1 = transaction, 0 = group) and looked up again when a coordinator answers
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS (failover).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kafka.protocol.api_message import ApiMessage

from onceflow.client.async_client import AsyncClient, finalized_feature_level
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.find_coordinator import find_coordinator
from onceflow.client.producer.errors import COORDINATOR_CODES, ProducerClosedError
from onceflow.client.security import ClientSecurity
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidTopic,
    KafkaError,
    TopicAuthorizationFailed,
    UnsupportedVersion,
)
from onceflow.protocol.transaction_versions import TRANSACTION_VERSION_FEATURE

log = logging.getLogger(__name__)


# Topic errors of a Metadata answer that waiting does not cure: send() fails with them at once instead
# of waiting max.block.ms (Kafka's Metadata.maybeThrowExceptionForTopic: invalid and unauthorized
# topics). Other errors (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...) keep it waiting.
_TOPIC_ERRORS_AT_ONCE = {
    ErrorCode.INVALID_TOPIC_EXCEPTION: InvalidTopic,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: TopicAuthorizationFailed,
}


class ProducerNetwork:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.security = security
        self.client = AsyncClient(
            bootstrap, client_id=client_id, request_timeout_s=self.request_timeout_s, security=security
        )
        self.brokers: dict[int, tuple[str, int]] = {}
        self.partition_counts: dict[str, int] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self._connections: dict[int, Connection] = {}
        self._opening: dict[int, asyncio.Task] = {}
        self._coordinators: dict[tuple[int, str], int] = {}
        self._refresh_lock = asyncio.Lock()
        self.last_refresh = 0.0
        self.closed = False

    async def close(self) -> None:
        self.closed = True
        opening, self._opening = self._opening, {}
        for task in opening.values():
            task.cancel()
        await asyncio.gather(*opening.values(), return_exceptions=True)  # one that got through is below
        conns, self._connections = self._connections, {}
        await asyncio.gather(*(c.close() for c in conns.values()), return_exceptions=True)
        await self.client.close()

    # -- metadata -----------------------------------------------------------------------------------

    async def refresh(self, topics: list[str]) -> None:
        """Reload leaders and partition counts of ``topics`` (asking the broker to create missing ones,
        as Kafka's producer does)."""
        async with self._refresh_lock:
            metadata = await self.client.metadata(sorted(set(topics)), auto_create=True)
            self.brokers.update(metadata.brokers)
            for name, info in metadata.topics.items():
                if info.error != ErrorCode.NONE or not info.partitions:
                    self.topic_errors[name] = info.error
                    continue
                self.topic_errors.pop(name, None)
                self.partition_counts[name] = len(info.partitions)
                for p, pinfo in info.partitions.items():
                    if pinfo.leader >= 0 and pinfo.error in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE):
                        self.leaders[(name, p)] = pinfo.leader
                    else:
                        self.leaders.pop((name, p), None)
            self.last_refresh = time.monotonic()

    async def wait_for_topic(self, topic: str, deadline: float) -> int:
        """The partition count of ``topic``, refreshing metadata until ``deadline`` (max.block.ms).
        A Metadata request that fails retriably (a lost connection, a request timeout) is sent again.
        Raises at once :class:`InvalidTopic` or :class:`TopicAuthorizationFailed` when the broker
        answers so for the topic (an invalid name is known from an earlier answer without asking
        again, as in Kafka's ``waitOnMetadata``); at the deadline the topic's error in the last
        answer, or REQUEST_TIMED_OUT if that is retriable (the topic does not exist, has no leader
        yet) or no answer came; :class:`ProducerClosedError` if the producer is closed meanwhile."""
        while True:
            count = self.partition_counts.get(topic)
            if count is not None:
                return count
            if self.closed:
                raise ProducerClosedError(f"producer closed while waiting for the metadata of {topic!r}")
            if self.topic_errors.get(topic) == ErrorCode.INVALID_TOPIC_EXCEPTION:
                self._raise_topic_error(topic)  # a name does not become valid
            try:
                await self.refresh([topic, *self.partition_counts])
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                # The connection failed, or the request timed out (which closed it): ask again.
                log.debug("metadata for %s failed: %s", topic, exc)
            else:
                self._raise_topic_error(topic)
            count = self.partition_counts.get(topic)
            if count is not None:
                return count
            if time.monotonic() >= deadline:
                error = self.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise KafkaError(
                    f"topic {topic!r} not available within max.block.ms ({error.name})",
                    ErrorCode.REQUEST_TIMED_OUT if error.retriable else error,
                )
            await asyncio.sleep(self.retry_backoff_s)

    def _raise_topic_error(self, topic: str) -> None:
        """Raise the topic's error if it is one that no wait cures (see ``_TOPIC_ERRORS_AT_ONCE``)."""
        code = self.topic_errors.get(topic)
        error_class = _TOPIC_ERRORS_AT_ONCE.get(code)
        if error_class is not None:
            raise error_class(f"cannot send to topic {topic!r}: the broker answered {code.name}")

    # -- connections --------------------------------------------------------------------------------

    def ready_connection(self, node: int) -> Connection | None:
        conn = self._connections.get(node)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node: int) -> Connection:
        conn = self.ready_connection(node)
        if conn is not None:
            return conn
        if self.closed:
            raise BrokerConnectionError("the producer is closed")
        stale = self._connections.pop(node, None)
        if stale is not None:
            await stale.close()  # failed: its socket is gone already; this reaps its read loop
        task = self._opening.get(node)
        if task is None:
            if node not in self.brokers:
                raise BrokerConnectionError(f"broker {node} is not in the metadata")
            task = self._opening[node] = asyncio.ensure_future(self._open(node, *self.brokers[node]))
        return await asyncio.shield(task)  # a cancelled caller leaves the connecting to go on

    async def _open(self, node: int, host: str, port: int) -> Connection:
        """Connect to ``node`` and keep the connection, even when every caller waiting for it was
        cancelled meanwhile (close() then closes it with the others)."""
        try:
            conn = await Connection.open(
                host,
                port,
                client_id=self.client_id,
                request_timeout_s=self.request_timeout_s,
                security=self.security,
            )
        finally:
            if self._opening.get(node) is asyncio.current_task():
                del self._opening[node]
        self._connections[node] = conn
        return conn

    async def any_connection(self) -> Connection:
        return await self.client.any_connection()

    def transaction_version(self) -> int:
        """The cluster's finalized ``transaction.version`` as our connections' ApiVersions told it."""
        conns = [c for c in self._connections.values() if not c.closed] + self.client.connections()
        return finalized_feature_level(conns, TRANSACTION_VERSION_FEATURE)

    # -- coordinators -------------------------------------------------------------------------------

    async def coordinator(self, key_type: int, key: str) -> Connection:
        node = self._coordinators.get((key_type, key))
        if node is None:
            found = await find_coordinator(await self.any_connection(), key, key_type)
            node = found.node_id
            self.brokers[node] = (found.host, found.port)
            self._coordinators[(key_type, key)] = node
        return await self.connection(node)

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    async def coordinator_request(
        self,
        key_type: int,
        key: str,
        make_request: Callable[[], ApiMessage],
        error_of: Callable[[ApiMessage], int],
        *,
        what: str,
        deadline: float,
        max_version: int | None = None,
        min_version: int | None = None,
        below_min_version: str = "",
        retry_codes: frozenset[ErrorCode] = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS}),
    ) -> ApiMessage:
        """Send to the coordinator of ``key``, finding it again on coordinator errors and retrying
        retriable answers until ``deadline``; returns the first response whose error is not retried.
        A coordinator whose highest version is below ``min_version`` gets nothing: UnsupportedVersion
        with ``below_min_version`` as its message."""
        backoff = min(self.retry_backoff_s, 0.02)  # Kafka retries CONCURRENT_TRANSACTIONS after 20 ms
        while True:
            code = ErrorCode.NONE
            try:
                conn = await self.coordinator(key_type, key)
                request = make_request()
                version = conn.version_for(type(request))
                if max_version is not None:
                    version = min(version, max_version)
                if min_version is not None and version < min_version:
                    raise UnsupportedVersion(
                        f"{what}: {below_min_version or f'the broker has no version {min_version}'}"
                    )
                response = await conn.send(request, version=version)
                code = ErrorCode(error_of(response))
            except KafkaError as exc:
                if not (exc.retriable or exc.code in COORDINATOR_CODES):
                    raise
                code, response = exc.code, None
            if code in COORDINATOR_CODES or code in (
                ErrorCode.NETWORK_EXCEPTION,
                ErrorCode.REQUEST_TIMED_OUT,
            ):
                self.forget_coordinator(key_type, key)
            elif code not in retry_codes:
                return response
            if time.monotonic() >= deadline:
                raise KafkaError(f"{what}: still {code.name} at the deadline", ErrorCode.REQUEST_TIMED_OUT)
            log.debug("%s: %s, retrying", what, code.name)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
