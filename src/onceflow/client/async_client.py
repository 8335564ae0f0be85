"""A small asyncio client: cluster metadata, topic admin, produce, fetch and list offsets.

One request per call, each sent to the right broker (the partition leader for produce, fetch and
list offsets). It is the core under :mod:`onceflow.client.simple` and the CLI; the full producer
(accumulator, idempotence, transactions) and consumer (groups) will be built on it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from onceflow.client.arguments import check_int, check_str, check_str_mapping
from onceflow.client.connection import DEFAULT_REQUEST_TIMEOUT_S, BrokerConnectionError, Connection
from onceflow.client.security import ClientSecurity
from onceflow.protocol.errors import ErrorCode, KafkaError, UnknownTopicOrPartition, kafka_error

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset (the LSO with read_committed)
_TOPIC_RESOURCE = 2  # DescribeConfigs resource type


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` to a list of addresses; raises ValueError naming a bad entry."""
    addresses = []
    for entry in bootstrap.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"bad bootstrap server {entry.strip()!r}: expected HOST:PORT, e.g. 127.0.0.1:9092"
            )
        addresses.append((host, int(port)))
    return addresses


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    error: ErrorCode = ErrorCode.NONE
    leader_epoch: int = -1  # Metadata v7+; -1 when the broker gave none


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo]
    internal: bool = False
    error: ErrorCode = ErrorCode.NONE
    topic_id: uuid.UUID | None = None  # Metadata v10+; None when the broker gave none


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicInfo]
    cluster_id: str | None = None
    controller_id: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass(slots=True)
class FetchedPartition:
    partition: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | None
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)


def finalized_feature_level(connections, name: str) -> int:
    """The finalized level of feature ``name`` (0 if not finalized) in the ApiVersions answer with the
    highest finalized-features epoch among ``connections``: as Kafka's client, trust the newest."""
    newest = max(connections, key=lambda c: c.finalized_features_epoch, default=None)
    if newest is None:
        return 0
    return newest.finalized_features.get(name, 0)


_NO_TOPIC_ID = uuid.UUID(int=0)


def _topic_id(value: uuid.UUID | None) -> uuid.UUID | None:
    """Metadata's topic id, or None for a broker that sends none (the all-zero id)."""
    return None if value is None or value == _NO_TOPIC_ID else value


def _raise_for(code: int, what: str, message: str | None = None) -> None:
    if code != ErrorCode.NONE:
        error = ErrorCode(code)
        raise kafka_error(error, f"{what}: {error.name}" + (f" ({message})" if message else ""))


class AsyncClient:
    """Connections to the brokers of one cluster, found through ``bootstrap``."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9092",
        *,
        client_id: str = "onceflow",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.security = security  # TLS / SASL settings for every connection (client.security)
        self.request_timeout_s = request_timeout_s
        self._connections: dict[tuple[str, int], Connection] = {}
        self._metadata: ClusterMetadata | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        await self.any_connection()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close every connection. A request after this (or one still connecting, e.g. a metadata
        refresh racing the close) raises :class:`BrokerConnectionError` and opens nothing."""
        self._closed = True
        connections, self._connections = self._connections, {}
        await asyncio.gather(*(c.close() for c in connections.values()), return_exceptions=True)

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerConnectionError("the client is closed")

    async def _connection(self, address: tuple[str, int]) -> Connection:
        self._check_open()
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:
            # A failed connection has let go of its socket already; this also reaps its read loop.
            del self._connections[address]
            await conn.close()
            self._check_open()
        conn = await Connection.open(
            *address,
            client_id=self.client_id,
            request_timeout_s=self.request_timeout_s,
            security=self.security,
        )
        if self._closed:
            await conn.close()  # closed while we connected: close() did not see this one
            self._check_open()
        current = self._connections.get(address)
        if current is not None and not current.closed:
            # Another caller connected while we did: one connection per broker, ours goes.
            await conn.close()
            return current
        self._connections[address] = conn
        return conn

    def connections(self) -> list[Connection]:
        """The open connections (for what their ApiVersions answers told, e.g. finalized features)."""
        return [c for c in self._connections.values() if not c.closed]

    async def any_connection(self) -> Connection:
        """A connection to some bootstrap server, trying each in turn."""
        self._check_open()
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        errors = []
        for address in self.bootstrap:
            try:
                return await self._connection(address)
            except BrokerConnectionError as exc:
                if self._closed:
                    raise
                errors.append(str(exc))
        raise BrokerConnectionError("; ".join(errors))

    async def _leader_connection(self, topic: str, partition: int) -> Connection:
        metadata = self._metadata
        info = None if metadata is None else metadata.topics.get(topic)
        if info is None or info.error != ErrorCode.NONE or partition not in info.partitions:
            # The cache may predate the topic or the partition (CreatePartitions): ask before giving up.
            metadata = await self.metadata([topic])
        info = metadata.topics.get(topic)
        if info is None or info.error != ErrorCode.NONE or partition not in info.partitions:
            raise UnknownTopicOrPartition(f"topic {topic!r} partition {partition} does not exist")
        leader = info.partitions[partition].leader
        if leader not in metadata.brokers:
            raise KafkaError(f"{topic}-{partition} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        return await self._connection(metadata.brokers[leader])

    # -- metadata and admin -------------------------------------------------------------------

    async def metadata(
        self, topics: list[str] | None = None, *, auto_create: bool = False
    ) -> ClusterMetadata:
        """Brokers and topics (all topics when ``topics`` is None)."""
        conn = await self.any_connection()
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create,
        )
        response = await conn.send(request)
        metadata = ClusterMetadata(
            brokers={b.node_id: (b.host, b.port) for b in response.brokers},
            topics={
                t.name: TopicInfo(
                    name=t.name,
                    internal=bool(t.is_internal),
                    error=ErrorCode(t.error_code),
                    topic_id=_topic_id(getattr(t, "topic_id", None)),
                    partitions={
                        p.partition_index: PartitionInfo(
                            p.partition_index,
                            p.leader_id,
                            list(p.replica_nodes),
                            list(p.isr_nodes),
                            ErrorCode(p.error_code),
                            getattr(p, "leader_epoch", -1),
                        )
                        for p in t.partitions
                    },
                )
                for t in response.topics
            },
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
        )
        self._metadata = metadata
        return metadata

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        timeout_ms: int = 30000,
    ) -> None:
        check_str(name, "name")
        partitions = check_int(partitions, "partitions", minimum=-1)
        replication_factor = check_int(replication_factor, "replication_factor", minimum=-1)
        configs = check_str_mapping(configs, "configs")
        conn = await self.any_connection()
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[
                CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                for k, v in (configs or {}).items()
            ],
        )
        response = await conn.send(
            CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms, validate_only=False)
        )
        for result in response.topics:
            _raise_for(result.error_code, f"cannot create topic {result.name!r}", result.error_message)
        self._metadata = None

    async def delete_topic(self, name: str, *, timeout_ms: int = 30000) -> None:
        check_str(name, "name")
        conn = await self.any_connection()
        response = await conn.send(DeleteTopicsRequest(topic_names=[name], timeout_ms=timeout_ms))
        for result in response.responses:
            _raise_for(result.error_code, f"cannot delete topic {result.name!r}", result.error_message)
        self._metadata = None

    async def describe_topic_configs(self, name: str) -> dict[str, str | None]:
        conn = await self.any_connection()
        resource = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=_TOPIC_RESOURCE, resource_name=name, configuration_keys=None
        )
        response = await conn.send(DescribeConfigsRequest(resources=[resource]))
        configs: dict[str, str | None] = {}
        for result in response.results:
            _raise_for(result.error_code, f"cannot describe configs of topic {name!r}", result.error_message)
            configs.update({c.name: c.value for c in result.configs})
        return configs

    # -- data ---------------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        records: bytes,
        *,
        acks: int = -1,
        timeout_ms: int = 30000,
        transactional_id: str | None = None,
    ) -> ProduceResult | None:
        """Append already-encoded batches to one partition; None with ``acks=0``."""
        conn = await self._leader_connection(topic, partition)
        data = ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
            ],
        )
        request = ProduceRequest(
            transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=[data]
        )
        response = await conn.send(request)
        if response is None:
            return None
        result = response.responses[0].partition_responses[0]
        _raise_for(result.error_code, f"produce to {topic}-{partition} failed", result.error_message)
        return ProduceResult(result.base_offset, result.log_append_time_ms, result.log_start_offset)

    async def fetch(
        self,
        topic: str,
        offsets: dict[int, int],
        *,
        isolation_level: int = 0,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52428800,
        partition_max_bytes: int = 1048576,
    ) -> dict[int, FetchedPartition]:
        """One Fetch of ``{partition: offset}`` (Kafka's fetch.max.bytes / max.partition.fetch.bytes defaults)."""
        by_connection: dict[Connection, list[int]] = {}
        for partition in offsets:
            by_connection.setdefault(await self._leader_connection(topic, partition), []).append(partition)
        results: dict[int, FetchedPartition] = {}
        for conn, partitions in by_connection.items():
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                isolation_level=isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=p, fetch_offset=offsets[p], partition_max_bytes=partition_max_bytes
                            )
                            for p in partitions
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            response = await conn.send(request)
            _raise_for(getattr(response, "error_code", 0), f"fetch from {topic} failed")
            for topic_response in response.responses:
                for p in topic_response.partitions:
                    _raise_for(p.error_code, f"fetch from {topic}-{p.partition_index} failed")
                    results[p.partition_index] = FetchedPartition(
                        partition=p.partition_index,
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        records=p.records,
                        aborted_transactions=[
                            (a.producer_id, a.first_offset) for a in p.aborted_transactions or ()
                        ],
                    )
        return results

    async def list_offsets(
        self,
        topic: str,
        partitions: list[int],
        *,
        timestamp: int = LATEST_TIMESTAMP,
        isolation_level: int = 0,
    ) -> dict[int, int]:
        """``{partition: offset}`` for a timestamp, or EARLIEST_TIMESTAMP / LATEST_TIMESTAMP."""
        offsets: dict[int, int] = {}
        for partition in partitions:
            conn = await self._leader_connection(topic, partition)
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation_level,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=partition, timestamp=timestamp
                            )
                        ],
                    )
                ],
            )
            response = await conn.send(request)
            result = response.topics[0].partitions[0]
            _raise_for(result.error_code, f"list offsets of {topic}-{partition} failed")
            offsets[partition] = result.offset
        return offsets
