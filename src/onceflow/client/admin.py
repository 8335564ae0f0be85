"""AdminClient: topics, configs, partitions, consumer groups, transactions, producers and client quotas.

:class:`AsyncAdminClient` is the asyncio core; :class:`AdminClient` runs it on a private event loop
for scripts. Each call sends the request to the broker Kafka's AdminClient would: any broker for
topics and configs, the group coordinator for groups, the transaction coordinator for
DescribeTransactions, every broker for ListTransactions, and the partition leader for
DescribeProducers and for aborting a hanging transaction (KIP-664: a WriteTxnMarkers abort).
Client quotas (KIP-546) go to any broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreatePartitionsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.producer import WriteTxnMarkersRequest

from onceflow.client.admin_security import SecurityAdmin
from onceflow.client.arguments import check_int, check_str, check_str_mapping
from onceflow.client.async_client import AsyncClient, ClusterMetadata, TopicInfo
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.consumer.classic.assignors import decode_assignment
from onceflow.client.consumer.coordinator import (
    OFFSET_COMMIT_MAX_VERSION,
    capped_version,
    offset_commit_topics,
    offset_fetch_topics,
)
from onceflow.client.consumer.structs import OffsetAndMetadata, TopicPartition
from onceflow.client.find_coordinator import find_coordinator
from onceflow.client.security import ClientSecurity
from onceflow.protocol.errors import ErrorCode, KafkaError, UnsupportedVersion
from onceflow.protocol.messages import ConsumerGroupDescribeRequest

T = TypeVar("T")
_TOPIC_RESOURCE = 2
_TXN_KEY_TYPE = 1
_OP_SET, _OP_DELETE = 0, 1
_OFFSET_FETCH_MAX_VERSION = 9  # v10 names topics by id
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas filter match types


def _check(code: int, what: str, message: str | None = None) -> None:
    if code != ErrorCode.NONE:
        error = ErrorCode(code)
        raise KafkaError(f"{what}: {error.name}" + (f" ({message})" if message else ""), error)


def _offset_fetch(
    group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
) -> OffsetFetchRequest:
    """One group's OffsetFetch in both forms: v1-7 name the group, v8+ a batch of groups (Kafka's
    admin sends that; Tansu misreads a v7 request for all topics)."""
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    return OffsetFetchRequest(
        group_id=group_id,
        topics=None if partitions is None else offset_fetch_topics(partitions),
        groups=[
            group(
                group_id=group_id,
                topics=None
                if partitions is None
                else offset_fetch_topics(partitions, group.OffsetFetchRequestTopics),
            )
        ],
        require_stable=require_stable,
    )


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """DescribeCluster's answer, or Metadata's where a broker lacks that API (``from_metadata``)."""

    cluster_id: str | None
    controller_id: int  # -1: none known
    brokers: list[BrokerDescription]
    from_metadata: bool = False


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for consumers' groups; "" for a group only ever committed to
    state: str  # "" from a broker older than ListGroups v4
    group_type: str  # "classic" or "consumer" (KIP-848); "" from a broker older than ListGroups v5


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition]
    # Consumer-protocol groups (KIP-848) only; None for classic members.
    member_epoch: int | None = None
    target_assignment: list[TopicPartition] | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the classic protocol's chosen assignor, or the consumer group's assignor
    members: list[MemberDescription] = field(default_factory=list)
    group_type: str = "classic"  # "consumer": a KIP-848 group, described by ConsumerGroupDescribe
    group_epoch: int | None = None
    assignment_epoch: int | None = None


# The states ListTransactions filters by (Kafka's TransactionState names).
TRANSACTION_STATES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


# The timeout a coordinator stores for a two-phase commit transactional id (KIP-939: the largest int32).
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]

    @property
    def is_two_phase_commit(self) -> bool:
        """The id's producer uses two-phase commit (KIP-939): its open transaction waits for an
        external coordinator's decision, with no timeout."""
        return self.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    def age_ms(self, now_ms: int) -> int | None:
        """How long the open transaction has been open, or None when none is."""
        if self.state not in _OPEN_STATES or self.start_time_ms < 0:
            return None
        return max(now_ms - self.start_time_ms, 0)


_OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int


@dataclass(frozen=True)
class ClientQuotaEntry:
    """One entity's quotas: ``entity`` maps "user" / "client-id" to a name, None for the default."""

    entity: dict[str, str | None]
    values: dict[str, float]


class AsyncAdminClient(SecurityAdmin):
    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        *,
        client_id: str = "onceflow-admin",
        request_timeout_ms: int = 30000,
        security: ClientSecurity | dict | None = None,
    ) -> None:
        """``security``: a :class:`ClientSecurity` or its settings by Kafka's names
        (``{"security.protocol": "SASL_SSL", "sasl.mechanism": ...}``)."""
        if isinstance(security, dict):
            security = ClientSecurity.from_config(security)
        self._security = security
        self._client = AsyncClient(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            security=security,
        )
        self._client_id = client_id
        self._timeout_ms = request_timeout_ms
        self._extra: dict[tuple[str, int], Connection] = {}
        self._closed = False

    async def __aenter__(self) -> AsyncAdminClient:
        await self._client.any_connection()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close every connection. A call after this raises :class:`BrokerConnectionError` and opens
        nothing; a connection still opening when this ran (a call racing it) is closed once open."""
        self._closed = True
        conns, self._extra = self._extra, {}
        await asyncio.gather(*(c.close() for c in conns.values()), return_exceptions=True)
        await self._client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerConnectionError("the admin client is closed")

    async def _conn_to(self, host: str, port: int) -> Connection:
        self._check_open()
        conn = self._extra.get((host, port))
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:
            del self._extra[(host, port)]
            await conn.close()  # failed: its socket is gone already; this reaps its read loop
            self._check_open()
        conn = await Connection.open(
            host,
            port,
            client_id=self._client_id,
            request_timeout_s=self._timeout_ms / 1000,
            security=self._security,
        )
        if self._closed:
            await conn.close()  # closed while we connected: close() did not see this one
            self._check_open()
        current = self._extra.get((host, port))
        if current is not None and not current.closed:
            await conn.close()  # another caller connected while we did: one connection per broker
            return current
        self._extra[(host, port)] = conn
        return conn

    async def _any(self) -> Connection:
        return await self._client.any_connection()

    async def _leader(self, topic: str, partition: int) -> Connection:
        return await self._leader_in(await self._client.metadata([topic]), topic, partition)

    async def _leader_in(self, metadata: ClusterMetadata, topic: str, partition: int) -> Connection:
        info = metadata.topics.get(topic)
        if info is None or info.error != ErrorCode.NONE:
            raise KafkaError(f"topic {topic!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if partition not in info.partitions:
            raise KafkaError(
                f"topic {topic!r} has no partition {partition} (it has {len(info.partitions)})",
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
        return await self._conn_to(*metadata.brokers[info.partitions[partition].leader])

    async def _by_leader(
        self, items: Iterable[tuple[TopicPartition, T]]
    ) -> dict[Connection, dict[str, list[T]]]:
        """``(partition, value)`` pairs grouped by the partition's leader, then by topic, with one
        Metadata request for all their topics; raises for a topic or partition that does not exist."""
        items = list(items)
        metadata = await self._client.metadata(sorted({tp.topic for tp, _ in items}))
        grouped: dict[Connection, dict[str, list[T]]] = {}
        for tp, value in items:
            conn = await self._leader_in(metadata, tp.topic, tp.partition)
            grouped.setdefault(conn, {}).setdefault(tp.topic, []).append(value)
        return grouped

    async def group_coordinator(self, group_id: str) -> tuple[int, str, int]:
        """The broker coordinating ``group_id``: ``(node id, host, port)``, as FindCoordinator names it."""
        return await find_coordinator(await self._client.any_connection(), group_id, 0)

    async def _coordinator(self, key: str, key_type: int = 0) -> Connection:
        _node, host, port = await find_coordinator(await self._client.any_connection(), key, key_type)
        return await self._conn_to(host, port)

    # -- topics ----------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
    ) -> None:
        await self._client.create_topic(
            name, partitions=partitions, replication_factor=replication_factor, configs=configs
        )

    async def delete_topic(self, name: str) -> None:
        await self._client.delete_topic(name)

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        return sorted(await self.describe_topics(internal=internal))

    async def describe_topic(self, name: str) -> TopicInfo:
        return (await self.describe_topics([name]))[name]

    async def describe_topics(
        self, names: list[str] | None = None, *, internal: bool = False
    ) -> dict[str, TopicInfo]:
        """The named topics (raising for one that does not exist), or with ``names`` None every topic
        (internal ones only if ``internal``): one Metadata request."""
        metadata: ClusterMetadata = await self._client.metadata(names)
        if names is None:
            return {t: info for t, info in metadata.topics.items() if internal or not info.internal}
        found = {}
        for name in names:
            info = metadata.topics.get(name)
            if info is None:
                raise KafkaError(f"topic {name!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            _check(info.error, f"describe topic {name!r}")
            found[name] = info
        return found

    async def describe_configs(self, topic: str) -> dict[str, str | None]:
        return await self._client.describe_topic_configs(topic)

    async def alter_configs(
        self, topic: str, set_: dict[str, str] | None = None, delete: list[str] | None = None
    ) -> None:
        """IncrementalAlterConfigs: set and delete (revert to default) topic configs."""
        check_str(topic, "topic")
        set_ = check_str_mapping(set_, "set_")
        r = IncrementalAlterConfigsRequest
        configs = [
            r.AlterConfigsResource.AlterableConfig(name=k, config_operation=_OP_SET, value=v)
            for k, v in (set_ or {}).items()
        ]
        configs += [
            r.AlterConfigsResource.AlterableConfig(name=k, config_operation=_OP_DELETE, value=None)
            for k in delete or ()
        ]
        request = r(
            resources=[
                r.AlterConfigsResource(resource_type=_TOPIC_RESOURCE, resource_name=topic, configs=configs)
            ],
            validate_only=False,
        )
        response = await (await self._any()).send(request)
        for result in response.responses:
            _check(result.error_code, f"alter configs of topic {topic!r}", result.error_message)

    async def create_partitions(self, topic: str, total: int) -> None:
        check_str(topic, "topic")
        total = check_int(total, "total", minimum=1)
        r = CreatePartitionsRequest
        request = r(
            topics=[r.CreatePartitionsTopic(name=topic, count=total, assignments=None)],
            timeout_ms=self._timeout_ms,
            validate_only=False,
        )
        response = await (await self._any()).send(request)
        for result in response.results:
            _check(result.error_code, f"create partitions of {topic!r}", result.error_message)

    async def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = 0
    ) -> dict[TopicPartition, int]:
        """ListOffsets to each partition's leader: per partition, the offset of the first record at
        or after a timestamp, or for ``EARLIEST_TIMESTAMP`` (-2) the log start and for
        ``LATEST_TIMESTAMP`` (-1) the log end (both in :mod:`onceflow.client.async_client`); with
        ``isolation_level=1`` (read_committed) the latest is the last stable offset."""
        by_request: dict[tuple[str, int], list[int]] = {}
        for tp, timestamp in specs.items():
            timestamp = check_int(timestamp, f"the timestamp for {tp.topic}-{tp.partition}")
            by_request.setdefault((tp.topic, timestamp), []).append(tp.partition)
        offsets = {}
        for (topic, timestamp), partitions in by_request.items():
            found = await self._client.list_offsets(
                topic, partitions, timestamp=timestamp, isolation_level=isolation_level
            )
            offsets.update({TopicPartition(topic, p): offset for p, offset in found.items()})
        return offsets

    async def describe_log_dirs(self) -> dict[int, dict[TopicPartition, int]]:
        """DescribeLogDirs to every broker: per broker id, the bytes on disk of each partition it
        holds (summed over its log directories). A broker without the API is left out."""
        metadata = await self._client.metadata([])
        sizes: dict[int, dict[TopicPartition, int]] = {}
        for node_id, (host, port) in sorted(metadata.brokers.items()):
            conn = await self._conn_to(host, port)
            try:
                version = conn.version_for(DescribeLogDirsRequest)
            except UnsupportedVersion:
                continue
            response = await conn.send(DescribeLogDirsRequest(topics=None), version=version)
            _check(getattr(response, "error_code", 0) or 0, f"describe log dirs of broker {node_id}")
            found = sizes[node_id] = {}
            for result in response.results:
                _check(result.error_code, f"describe log dir {result.log_dir} of broker {node_id}")
                for t in result.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        found[tp] = found.get(tp, 0) + p.partition_size
        return sizes

    # -- cluster ---------------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and the brokers: DescribeCluster (KIP-700), or Metadata
        from a broker that lacks it."""
        conn = await self._any()
        try:
            version = conn.version_for(DescribeClusterRequest)
        except UnsupportedVersion:
            version = None
        if version is not None:
            response = await conn.send(
                DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1),
                version=version,
            )
            _check(response.error_code, "describe cluster", response.error_message)
            brokers = [
                BrokerDescription(b.broker_id, b.host, b.port, b.rack, bool(getattr(b, "is_fenced", False)))
                for b in response.brokers
            ]
            return ClusterDescription(response.cluster_id, response.controller_id, brokers)
        metadata = await self._client.metadata([])
        brokers = [BrokerDescription(n, h, p) for n, (h, p) in sorted(metadata.brokers.items())]
        return ClusterDescription(metadata.cluster_id, metadata.controller_id, brokers, from_metadata=True)

    # -- groups ----------------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group on every broker (ListGroups to each), sorted by group id."""
        metadata = await self._client.metadata([])
        groups = []
        for host, port in metadata.brokers.values():
            response = await (await self._conn_to(host, port)).send(ListGroupsRequest())
            _check(response.error_code, "list groups")
            groups += [
                GroupListing(
                    g.group_id,
                    g.protocol_type,
                    getattr(g, "group_state", None) or "",
                    getattr(g, "group_type", None) or "",
                )
                for g in response.groups
            ]
        return sorted(groups, key=lambda g: g.group_id)

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer-protocol group (KIP-848) as ConsumerGroupDescribe tells it (epochs, assignor,
        current and target assignment per member); any other group, or a coordinator without that
        API, as DescribeGroups tells it (librdkafka's order)."""
        conn = await self._coordinator(group_id)
        described = await self._describe_consumer_group(conn, group_id)
        if described is not None:
            return described
        response = await conn.send(
            DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False)
        )
        g = response.groups[0]
        _check(g.error_code, f"describe group {group_id!r}")
        members = [
            MemberDescription(
                m.member_id,
                getattr(m, "group_instance_id", None),
                m.client_id,
                m.client_host,
                decode_assignment(m.member_assignment).partitions if g.protocol_type == "consumer" else [],
            )
            for m in g.members
        ]
        return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members)

    async def _describe_consumer_group(self, conn: Connection, group_id: str) -> GroupDescription | None:
        try:
            version = min(conn.version_for(ConsumerGroupDescribeRequest), 1)
        except UnsupportedVersion:
            return None
        response = await conn.send(
            ConsumerGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False),
            version=version,
        )
        g = response.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None  # a classic group, or none: DescribeGroups tells
        _check(g.error_code, f"describe group {group_id!r}", g.error_message)
        if g.group_epoch < 0:
            # No consumer group has a negative epoch: a coordinator that answers so (Tansu does, for
            # every group) does not keep KIP-848 groups, and DescribeGroups is the one to ask.
            return None

        def partitions(assignment) -> list[TopicPartition]:
            return sorted(
                TopicPartition(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions
            )

        members = [
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                partitions(m.assignment),
                member_epoch=m.member_epoch,
                target_assignment=partitions(m.target_assignment),
            )
            for m in g.members
        ]
        return GroupDescription(
            g.group_id,
            g.group_state,
            "consumer",
            g.assignor_name,
            members,
            group_type="consumer",
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )

    async def list_group_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (of ``partitions``, or all), leaving out partitions with
        none. ``require_stable`` (KIP-447, as Kafka's ``requireStable``): also leave out partitions
        whose commit is pending in an open transaction (the coordinator answers
        UNSTABLE_OFFSET_COMMIT); without it those show their last committed offset."""
        conn = await self._coordinator(group_id)
        version = capped_version(conn, OffsetFetchRequest, _OFFSET_FETCH_MAX_VERSION)
        response = await conn.send(_offset_fetch(group_id, partitions, require_stable), version=version)
        answer = response.groups[0] if version >= 8 else response
        _check(getattr(answer, "error_code", 0) or 0, f"list offsets of group {group_id!r}")
        result = {}
        for t in answer.topics:
            for p in t.partitions:
                if require_stable and p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                    continue
                _check(p.error_code, f"offset of {t.name}-{p.partition_index} in group {group_id!r}")
                if p.committed_offset >= 0:
                    result[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or ""
                    )
        return result

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for the group from outside its membership (OffsetCommit with generation
        -1 and no member id), as Kafka's alterConsumerGroupOffsets: the coordinator takes them only
        while the group has no members, and creates a group that does not exist. Raises
        ``KafkaError`` for the first partition refused (UNKNOWN_MEMBER_ID while the group has
        members)."""
        if not offsets:
            return
        commits = {
            tp: (value, "") if isinstance(value, int) else (value.offset, value.metadata)
            for tp, value in offsets.items()
        }
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=offset_commit_topics(commits),
        )
        conn = await self._coordinator(group_id)
        response = await conn.send(
            request, version=capped_version(conn, OffsetCommitRequest, OFFSET_COMMIT_MAX_VERSION)
        )
        for t in response.topics:
            for p in t.partitions:
                _check(p.error_code, f"alter offset of {t.name}-{p.partition_index} in group {group_id!r}")

    async def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its committed offsets; raises ``KafkaError`` if refused
        (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        code = (await self.delete_groups([group_id]))[group_id]
        _check(code, f"delete group {group_id!r}")

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups, one request per coordinator: each group's answer, in the order given
        (NONE when deleted). A coordinator that cannot be found raises ``KafkaError``."""
        unique = list(dict.fromkeys(group_ids))
        by_coordinator: dict[Connection, list[str]] = {}
        for group_id in unique:
            by_coordinator.setdefault(await self._coordinator(group_id), []).append(group_id)
        answers = {}
        for conn, ids in by_coordinator.items():
            response = await conn.send(DeleteGroupsRequest(groups_names=ids))
            answers.update({r.group_id: ErrorCode(r.error_code) for r in response.results})
        return {group_id: answers[group_id] for group_id in unique}

    # -- transactions and producers --------------------------------------------------------------

    async def list_transactions(
        self,
        states: list[str] | None = None,
        *,
        producer_ids: list[int] | None = None,
        min_duration_ms: int = -1,
        pattern: str | None = None,
    ) -> list[TransactionListing]:
        """Every coordinator's transactional ids, filtered as ListTransactions filters them: by state
        (names in :data:`TRANSACTION_STATES`; others match nothing), producer id, running longer than
        ``min_duration_ms`` (v1+), and an RE2 ``pattern`` matching the whole id (v2+, KIP-1152)."""
        metadata = await self._client.metadata([])
        out = []
        for host, port in metadata.brokers.values():
            conn = await self._conn_to(host, port)
            response = await conn.send(
                ListTransactionsRequest(
                    state_filters=list(states or []),
                    producer_id_filters=list(producer_ids or []),
                    duration_filter=min_duration_ms,
                    transactional_id_pattern=pattern,
                )
            )
            _check(response.error_code, "list transactions")
            out += [
                TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            ]
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        conn = await self._coordinator(transactional_id, _TXN_KEY_TYPE)
        response = await conn.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]))
        t = response.transaction_states[0]
        _check(t.error_code, f"describe transaction {transactional_id!r}")
        return TransactionDescription(
            t.transactional_id,
            t.transaction_state,
            t.transaction_timeout_ms,
            t.transaction_start_time_ms,
            t.producer_id,
            t.producer_epoch,
            [TopicPartition(x.topic, p) for x in t.topics for p in x.partitions],
        )

    async def describe_producers(self, tp: TopicPartition) -> list[ProducerState]:
        """The producers ``tp``'s leader keeps state for; raises the partition's error."""
        answer = (await self.describe_producers_of([tp]))[tp]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    async def describe_producers_of(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, list[ProducerState] | KafkaError]:
        """:meth:`describe_producers` for many partitions, one request per leader; a partition that
        failed maps to its error instead of raising, so one deleted topic does not hide the rest."""
        by_leader = await self._by_leader((tp, tp.partition) for tp in tps)
        r = DescribeProducersRequest
        answers: dict[TopicPartition, list[ProducerState] | KafkaError] = {}
        for conn, topics in by_leader.items():
            request = r(
                topics=[r.TopicRequest(name=name, partition_indexes=ps) for name, ps in topics.items()]
            )
            response = await conn.send(request)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    try:
                        _check(
                            p.error_code,
                            f"describe producers of {t.name}-{p.partition_index}",
                            p.error_message,
                        )
                    except KafkaError as exc:
                        answers[tp] = exc
                        continue
                    answers[tp] = [
                        ProducerState(
                            s.producer_id,
                            s.producer_epoch,
                            s.last_sequence,
                            s.last_timestamp,
                            s.coordinator_epoch,
                            s.current_txn_start_offset,
                        )
                        for s in p.active_producers
                    ]
        return answers

    async def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete every record below the given offset of each partition (-1: the high watermark);
        returns each partition's log start afterwards (its low watermark). Raises ``KafkaError`` for
        the first partition refused, e.g. OFFSET_OUT_OF_RANGE beyond the high watermark."""
        before = {
            tp: check_int(offset, f"the offset for {tp.topic}-{tp.partition}", minimum=-1)
            for tp, offset in before.items()
        }
        by_leader = await self._by_leader((tp, (tp.partition, offset)) for tp, offset in before.items())
        r = DeleteRecordsRequest
        low_watermarks = {}
        for conn, topics in by_leader.items():
            request = r(
                topics=[
                    r.DeleteRecordsTopic(
                        name=name,
                        partitions=[
                            r.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=p, offset=o)
                            for p, o in parts
                        ],
                    )
                    for name, parts in topics.items()
                ],
                timeout_ms=self._timeout_ms,
            )
            response = await conn.send(request)
            for t in response.topics:
                for p in t.partitions:
                    _check(p.error_code, f"delete records of {t.name}-{p.partition_index}")
                    low_watermarks[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        return low_watermarks

    async def abort_transaction(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write an abort marker for a hanging transaction on one partition (KIP-664): find the
        producer with :meth:`describe_producers`; the partition's LSO then moves past it."""
        conn = await self._leader(tp.topic, tp.partition)
        r = WriteTxnMarkersRequest
        marker = r.WritableTxnMarker(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transaction_result=False,
            topics=[
                r.WritableTxnMarker.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])
            ],
            coordinator_epoch=coordinator_epoch,
        )
        response = await conn.send(r(markers=[marker]))
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    _check(
                        p.error_code,
                        f"abort transaction of producer {producer_id} on {t.name}-{p.partition_index}",
                    )

    async def describe_client_quotas(
        self,
        exact: Mapping[str, str | None] | None = None,
        specified: Iterable[str] = (),
        *,
        strict: bool = False,
    ) -> list[ClientQuotaEntry]:
        """DescribeClientQuotas: the quotas of the entities whose ``exact`` types have these names
        (None: the default entity) and that have the ``specified`` types at all; ``strict``: no other
        types. No filter at all: every entity."""
        r = DescribeClientQuotasRequest
        components = [
            r.ComponentData(entity_type=t, match_type=_MATCH_DEFAULT if n is None else _MATCH_EXACT, match=n)
            for t, n in (exact or {}).items()
        ]
        components += [
            r.ComponentData(entity_type=t, match_type=_MATCH_SPECIFIED, match=None) for t in specified
        ]
        response = await (await self._any()).send(r(components=components, strict=strict))
        _check(response.error_code, "describe client quotas", response.error_message)
        return [
            ClientQuotaEntry(
                {e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values}
            )
            for entry in response.entries or []
        ]

    async def alter_client_quotas(
        self,
        entity: Mapping[str, str | None],
        set_: Mapping[str, float] | None = None,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """AlterClientQuotas: set and remove quotas (``producer_byte_rate``, ``consumer_byte_rate``,
        ``request_percentage``) of one entity, e.g. ``{"client-id": "app"}`` or ``{"user": None}``
        (None: the default)."""
        r = AlterClientQuotasRequest
        ops = [r.EntryData.OpData(key=k, value=float(v), remove=False) for k, v in (set_ or {}).items()]
        ops += [r.EntryData.OpData(key=k, value=0.0, remove=True) for k in delete]
        entry = r.EntryData(
            entity=[r.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()], ops=ops
        )
        response = await (await self._any()).send(r(entries=[entry], validate_only=validate_only))
        for result in response.entries:
            _check(result.error_code, "alter client quotas", result.error_message)


class AdminClient:
    """Blocking facade: the same methods as :class:`AsyncAdminClient`, run on a private loop."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", **kwargs) -> None:
        self._runner = asyncio.Runner()
        self._admin = AsyncAdminClient(bootstrap_servers, **kwargs)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self._admin.close())
        finally:
            self._runner.close()

    def __getattr__(self, name: str):
        method = getattr(self._admin, name)
        if not asyncio.iscoroutinefunction(method) or name.startswith("_"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            return self._runner.run(method(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call
