"""What the console's pages show, gathered through :class:`AsyncAdminClient` (no HTTP here): the
cluster, topics with their partitions' offsets and sizes, groups with lag, transactions (hanging ones
flagged as ``onceflow txn find-hanging`` flags them) and idempotent producers.

Everything goes through Kafka's APIs, so the console works against any Kafka-protocol broker; an API
a broker lacks (UNSUPPORTED_VERSION) leaves its column empty with a note instead of failing the page.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from onceflow.client.admin import (
    AsyncAdminClient,
    ClusterDescription,
    GroupDescription,
    GroupListing,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicInfo
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.fetch_records import READ_COMMITTED
from onceflow.client.hanging_transactions import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, find_hanging
from onceflow.protocol.errors import ErrorCode, KafkaError, UnsupportedVersion


class NotFound(KafkaError):
    """A topic or group named in a URL that the cluster does not have."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_start: int = -1
    high_watermark: int = -1  # the log end offset for a single replica
    last_stable: int = -1
    size: int | None = None  # bytes on the leader's disk (DescribeLogDirs)
    error: str = ""

    @property
    def records(self) -> int:
        return max(self.high_watermark - self.log_start, 0) if self.log_start >= 0 else 0

    @property
    def open_transaction(self) -> bool:
        return 0 <= self.last_stable < self.high_watermark


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication: int
    size: int | None
    records: int | None = None


@dataclass
class Overview:
    cluster: ClusterDescription
    topics: int
    partitions: int
    groups: int | None
    notes: list[str] = field(default_factory=list)


async def overview(admin: AsyncAdminClient) -> Overview:
    cluster = await admin.describe_cluster()
    topics = await admin.describe_topics(internal=True)
    notes = []
    try:
        groups: int | None = len(await admin.list_groups())
    except KafkaError as exc:
        groups = None
        notes.append(f"groups unavailable: {exc}")
    return Overview(cluster, len(topics), sum(len(t.partitions) for t in topics.values()), groups, notes)


async def _sizes(admin: AsyncAdminClient, notes: list[str]) -> dict[tuple[int, TopicPartition], int]:
    """``(broker, partition) -> bytes`` from DescribeLogDirs; a note instead where it fails."""
    try:
        by_broker = await admin.describe_log_dirs()
    except (UnsupportedVersion, KafkaError) as exc:
        notes.append(f"sizes unavailable: {exc}")
        return {}
    return {(node, tp): size for node, sizes in by_broker.items() for tp, size in sizes.items()}


async def topics(admin: AsyncAdminClient, *, internal: bool = True) -> tuple[list[TopicRow], list[str]]:
    notes: list[str] = []
    described = await admin.describe_topics(internal=internal)
    sizes = await _sizes(admin, notes)
    rows = []
    for name, info in sorted(described.items()):
        replication = max((len(p.replicas) for p in info.partitions.values()), default=0)
        size = None
        if sizes:
            size = sum(sizes.get((p.leader, TopicPartition(name, i)), 0) for i, p in info.partitions.items())
        rows.append(TopicRow(name, info.internal, len(info.partitions), replication, size))
    return rows, notes


async def describe_topic(admin: AsyncAdminClient, name: str) -> TopicInfo:
    described = await admin.describe_topics(internal=True)
    info = described.get(name)
    if info is None:
        raise NotFound(f"topic {name!r} does not exist")
    return info


async def topic_partitions(admin: AsyncAdminClient, info: TopicInfo) -> tuple[list[PartitionRow], list[str]]:
    """Per partition: leader, replicas, ISR, log start, high watermark, LSO and size on disk."""
    notes: list[str] = []
    tps = [TopicPartition(info.name, p) for p in sorted(info.partitions)]
    rows = {
        tp.partition: PartitionRow(
            tp.partition,
            info.partitions[tp.partition].leader,
            info.partitions[tp.partition].replicas,
            info.partitions[tp.partition].isr,
        )
        for tp in tps
    }
    try:
        starts = await admin.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
        ends = await admin.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))
        stable = await admin.list_offsets(
            dict.fromkeys(tps, LATEST_TIMESTAMP), isolation_level=READ_COMMITTED
        )
    except KafkaError as exc:
        notes.append(f"offsets unavailable: {exc}")
        starts = ends = stable = {}
    sizes = await _sizes(admin, notes)
    for tp in tps:
        row = rows[tp.partition]
        row.log_start = starts.get(tp, -1)
        row.high_watermark = ends.get(tp, -1)
        row.last_stable = stable.get(tp, -1)
        if sizes:
            row.size = sizes.get((row.leader, tp))
    return [rows[p] for p in sorted(rows)], notes


async def topic_configs(admin: AsyncAdminClient, name: str) -> tuple[dict[str, str | None], list[str]]:
    try:
        return dict(sorted((await admin.describe_configs(name)).items())), []
    except KafkaError as exc:
        return {}, [f"configs unavailable: {exc}"]


async def producers(admin: AsyncAdminClient, info: TopicInfo) -> list[tuple[int, list[ProducerState], str]]:
    """Per partition, the producers its leader keeps state for (DescribeProducers), or its error."""
    tps = [TopicPartition(info.name, p) for p in sorted(info.partitions)]
    try:
        answers = await admin.describe_producers_of(tps)
    except UnsupportedVersion as exc:
        return [(tp.partition, [], str(exc)) for tp in tps]
    rows = []
    for tp in tps:
        answer = answers.get(tp, KafkaError("no answer from the leader"))
        if isinstance(answer, KafkaError):
            rows.append((tp.partition, [], str(answer)))
        else:
            rows.append((tp.partition, answer, ""))
    return rows


# -- groups ------------------------------------------------------------------------------------------


@dataclass
class GroupLagRow:
    tp: TopicPartition
    committed: int  # -1: nothing committed (or only a pending transactional commit)
    log_end: int  # -1: the topic is gone
    member: str = ""
    client: str = ""
    host: str = ""

    @property
    def lag(self) -> int | None:
        if self.committed < 0 or self.log_end < 0:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass
class GroupRow:
    listing: GroupListing
    members: int | None
    lag: int | None
    error: str = ""


async def group_lag(
    admin: AsyncAdminClient, group_id: str, description: GroupDescription
) -> list[GroupLagRow]:
    """Per partition the group committed to or whose member holds it: the stable committed offset
    (a commit pending in an open transaction does not count), the log end and the member."""
    committed = await admin.list_group_offsets(group_id, require_stable=True)
    owner = {tp: m for m in description.members for tp in m.assignment}
    keys = sorted(set(committed) | set(owner))
    ends: dict[TopicPartition, int] = {}
    for topic in sorted({tp.topic for tp in keys}):
        try:
            ends.update(await admin.list_offsets(dict.fromkeys([tp for tp in keys if tp.topic == topic], -1)))
        except KafkaError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
    rows = []
    for tp in keys:
        m = owner.get(tp)
        rows.append(
            GroupLagRow(
                tp,
                committed[tp].offset if tp in committed else -1,
                ends.get(tp, -1),
                m.member_id if m else "",
                m.client_id if m else "",
                m.client_host if m else "",
            )
        )
    return rows


async def groups(admin: AsyncAdminClient) -> list[GroupRow]:
    rows = []
    for listing in await admin.list_groups():
        try:
            description = await admin.describe_group(listing.group_id)
            lag_rows = await group_lag(admin, listing.group_id, description)
            lags = [r.lag for r in lag_rows if r.lag is not None]
            rows.append(GroupRow(listing, len(description.members), sum(lags) if lags else None))
        except KafkaError as exc:
            rows.append(GroupRow(listing, None, None, str(exc)))
    return rows


async def describe_group(
    admin: AsyncAdminClient, group_id: str
) -> tuple[GroupDescription, list[GroupLagRow]]:
    description = await admin.describe_group(group_id)
    rows = await group_lag(admin, group_id, description)
    if description.state in ("Dead", "") and not description.members and not rows:
        # What a coordinator answers for a group it does not know (as Kafka's tool reads it).
        raise NotFound(f"consumer group {group_id!r} does not exist")
    return description, rows


# -- transactions ------------------------------------------------------------------------------------


@dataclass
class TransactionRow:
    listing: TransactionListing
    description: TransactionDescription | None
    error: str = ""

    def age_ms(self, now_ms: int) -> int | None:
        d = self.description
        if d is None or d.start_time_ms < 0 or d.state in ("Empty", "CompleteCommit", "CompleteAbort"):
            return None
        return max(now_ms - d.start_time_ms, 0)


@dataclass
class HangingRow:
    tp: TopicPartition
    producer: ProducerState

    def age_ms(self, now_ms: int) -> int | None:
        ts = self.producer.last_timestamp
        return max(now_ms - ts, 0) if ts >= 0 else None


async def transactions(
    admin: AsyncAdminClient, max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
) -> tuple[list[TransactionRow], list[HangingRow], list[str]]:
    notes: list[str] = []
    rows = []
    try:
        listed = await admin.list_transactions()
    except KafkaError as exc:
        listed = []
        notes.append(f"transactions unavailable: {exc}")
    for listing in listed:
        try:
            rows.append(TransactionRow(listing, await admin.describe_transaction(listing.transactional_id)))
        except KafkaError as exc:
            rows.append(TransactionRow(listing, None, str(exc)))
    try:
        hanging = [HangingRow(tp, p) for tp, p in await find_hanging(admin, None, max_transaction_timeout_ms)]
    except KafkaError as exc:
        hanging = []
        notes.append(f"hanging transactions cannot be searched for: {exc}")
    return rows, hanging, notes


def now_ms() -> int:
    return int(time.time() * 1000)
