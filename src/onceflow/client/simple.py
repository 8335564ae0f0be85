"""A blocking facade over :class:`~onceflow.client.async_client.AsyncClient` for scripts and the CLI.

Each call runs the async client on a private event loop (``asyncio.Runner``), so connections stay
open between calls. ``produce`` partitions records (murmur2 of the key, else round robin), packs them
into batches of at most ``batch_size`` bytes and keeps up to five requests in flight per call, as
Kafka's producer does with ``max.in.flight.requests.per.connection=5``; it is not idempotent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from onceflow.client.arguments import check_int, check_str
from onceflow.client.async_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AsyncClient,
    ClusterMetadata,
    ProduceResult,
    TopicInfo,
)
from onceflow.client.fetch_records import READ_COMMITTED, READ_UNCOMMITTED, visible_records
from onceflow.client.partitioner import RoundRobin, partition_for_key
from onceflow.client.security import ClientSecurity
from onceflow.protocol.compression import CompressionType, codec_for_name
from onceflow.protocol.errors import ErrorCode, KafkaError, UnknownTopicOrPartition
from onceflow.protocol.record_codec import ProducerRecord, encode_batch

# Fetch errors after which the partition has another leader (or will soon): refresh and fetch again.
_LEADER_MOVED = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)

__all__ = ["ConsumedRecord", "SimpleClient", "isolation_level_for_name"]

BATCH_SIZE = 16384  # Kafka's batch.size
MAX_IN_FLIGHT = 5  # Kafka's max.in.flight.requests.per.connection
METADATA_ATTEMPTS = 20
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
_RECORD_OVERHEAD = 20  # rough per-record framing bytes, for sizing batches


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def isolation_level_for_name(name: str | int) -> int:
    """``read_uncommitted`` → 0, ``read_committed`` → 1 (Kafka's ``isolation.level`` values)."""
    if isinstance(name, int):
        return name
    levels = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
    try:
        return levels[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown isolation level {name!r}: use read_uncommitted or read_committed")


def _as_bytes(data: bytes | str | None) -> bytes | None:
    return data.encode("utf-8") if isinstance(data, str) else data


class SimpleClient:
    """Blocking client for one cluster. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9092",
        *,
        client_id: str = "onceflow",
        request_timeout_s=30.0,
        security: ClientSecurity | dict | None = None,
    ):
        """``security``: TLS/SASL settings (:class:`ClientSecurity`, or Kafka-named settings)."""
        if isinstance(security, dict):
            security = ClientSecurity.from_config(security)
        self._runner = asyncio.Runner()
        self._client = AsyncClient(
            bootstrap, client_id=client_id, request_timeout_s=request_timeout_s, security=security
        )
        self._round_robin = RoundRobin()

    def __enter__(self) -> SimpleClient:
        try:
            self._run(self._client.any_connection())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._runner.close()

    def _run(self, coro):
        return self._runner.run(coro)

    # -- admin --------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        return self._run(self._client.metadata(topics))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        topics = self.metadata().topics.values()
        return sorted(t.name for t in topics if include_internal or not t.internal)

    def create_topic(
        self, name: str, *, partitions: int = 1, replication_factor: int = 1, configs=None
    ) -> None:
        self._run(
            self._client.create_topic(
                name, partitions=partitions, replication_factor=replication_factor, configs=configs
            )
        )

    def delete_topic(self, name: str) -> None:
        self._run(self._client.delete_topic(name))

    def describe_topic(self, name: str) -> tuple[TopicInfo, dict[str, str | None]]:
        """The topic's partitions and its configs; raises UnknownTopicOrPartition if it does not exist."""
        return self._run(self._describe_topic(name))

    async def _describe_topic(self, name: str) -> tuple[TopicInfo, dict[str, str | None]]:
        info = await self._topic_info(name)
        return info, await self._client.describe_topic_configs(name)

    def topic_info(self, name: str, *, auto_create: bool = False) -> TopicInfo:
        """The topic's partitions and leaders; ``auto_create``: ask the broker to create it (if it
        allows auto-creation), as a producer does. Raises UnknownTopicOrPartition."""
        check_str(name, "topic")
        return self._run(self._topic_info(name, auto_create=auto_create))

    async def _topic_info(self, name: str, *, auto_create: bool = False) -> TopicInfo:
        for attempt in range(METADATA_ATTEMPTS):
            info = (await self._client.metadata([name], auto_create=auto_create)).topics.get(name)
            # A topic just auto-created may report LEADER_NOT_AVAILABLE for a moment; ask again.
            if (
                info is not None
                and info.error == ErrorCode.LEADER_NOT_AVAILABLE
                and attempt + 1 < METADATA_ATTEMPTS
            ):
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            break
        if info is None or info.error != ErrorCode.NONE or not info.partitions:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return info

    # -- produce ------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Iterable,
        *,
        partition: int | None = None,
        acks: int = -1,
        compression: str | int = "none",
        batch_size: int = BATCH_SIZE,
    ) -> list[tuple[int, ProduceResult | None, int]]:
        """Send ``records`` (``(key, value)`` tuples or ProducerRecords; str is sent as UTF-8).

        Returns ``(partition, result, record_count)`` per batch sent, in order; ``result`` is None
        with ``acks=0``.
        """
        check_str(topic, "topic")
        if partition is not None:
            partition = check_int(partition, "partition", minimum=0)
        codec = codec_for_name(compression) if isinstance(compression, str) else CompressionType(compression)
        return self._run(self._produce(topic, records, partition, acks, codec, batch_size))

    async def _produce(self, topic, records, partition, acks, codec, batch_size):
        # Like Kafka's producers, ask for the topic to be auto-created (if the broker allows it).
        num_partitions = len((await self._topic_info(topic, auto_create=True)).partitions)
        pending: dict[int, list[ProducerRecord]] = {}
        pending_bytes: dict[int, int] = {}
        sent: list[tuple[int, int, asyncio.Task]] = []  # (partition, record count, request) in send order

        async def send(p: int) -> None:
            batch = pending.pop(p)
            del pending_bytes[p]
            encoded = encode_batch(batch, compression=codec)
            # Tasks start in creation order, so requests go out in order on the connection.
            sent.append(
                (p, len(batch), asyncio.ensure_future(self._client.produce(topic, p, encoded, acks=acks)))
            )
            unfinished = [task for _p, _n, task in sent if not task.done()]
            if len(unfinished) >= MAX_IN_FLIGHT:
                await asyncio.wait([unfinished[0]])

        for item in records:
            rec = item if isinstance(item, ProducerRecord) else ProducerRecord(*item)
            rec = rec._replace(key=_as_bytes(rec.key), value=_as_bytes(rec.value))
            if partition is not None:
                p = partition
            elif rec.key is not None:
                p = partition_for_key(rec.key, num_partitions)
            else:
                p = self._round_robin.next_partition(num_partitions)
            pending.setdefault(p, []).append(rec)
            size = pending_bytes.get(p, 0) + len(rec.key or b"") + len(rec.value or b"") + _RECORD_OVERHEAD
            pending_bytes[p] = size
            if size >= batch_size:
                await send(p)
        for p in list(pending):
            await send(p)
        try:
            results = await asyncio.gather(*(task for _p, _n, task in sent))
        except BaseException:
            for _p, _n, task in sent:
                task.cancel()
            raise
        return [(p, result, count) for (p, count, _task), result in zip(sent, results, strict=True)]

    # -- consume ------------------------------------------------------------------------------

    def list_offsets(
        self, topic: str, *, timestamp: int = LATEST_TIMESTAMP, isolation_level: str | int = READ_UNCOMMITTED
    ) -> dict[int, int]:
        check_str(topic, "topic")
        timestamp = check_int(timestamp, "timestamp")
        return self._run(self._list_offsets(topic, timestamp, isolation_level_for_name(isolation_level)))

    async def _list_offsets(self, topic: str, timestamp: int, isolation_level: int) -> dict[int, int]:
        partitions = sorted((await self._topic_info(topic)).partitions)
        return await self._client.list_offsets(
            topic, partitions, timestamp=timestamp, isolation_level=isolation_level
        )

    def consume(
        self,
        topic: str,
        *,
        from_beginning: bool = True,
        isolation_level: str | int = READ_UNCOMMITTED,
        max_messages: int | None = None,
        timeout_s: float | None = 5.0,
    ) -> Iterator[ConsumedRecord]:
        """Records of every partition of ``topic``, until ``max_messages`` or ``timeout_s`` without new
        data (None: forever)."""
        level = isolation_level_for_name(isolation_level)
        start = EARLIEST_TIMESTAMP if from_beginning else LATEST_TIMESTAMP
        positions = self._run(self._list_offsets(topic, start, level))
        seen = 0
        idle_since = time.monotonic()
        while max_messages is None or seen < max_messages:
            if timeout_s is not None and time.monotonic() - idle_since > timeout_s:
                return
            try:
                fetched = self._run(
                    self._client.fetch(topic, positions, isolation_level=level, max_wait_ms=200)
                )
            except KafkaError as exc:
                if exc.code not in _LEADER_MOVED:
                    raise
                # A leader moved (failover, preferred election): ask who leads now and fetch again,
                # within the same idle timeout.
                time.sleep(0.2)
                self._run(self._client.metadata([topic]))
                continue
            for p, data in sorted(fetched.items()):
                records, positions[p] = visible_records(
                    data.records,
                    fetch_offset=positions[p],
                    isolation_level=level,
                    aborted_transactions=data.aborted_transactions,
                )
                for r in records:
                    yield ConsumedRecord(topic, p, r.offset, r.timestamp, r.key, r.value, r.headers)
                    seen += 1
                    idle_since = time.monotonic()
                    if max_messages is not None and seen >= max_messages:
                        return
