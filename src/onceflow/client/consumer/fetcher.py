"""Fetching: one long-poll loop per partition leader, buffering raw responses, decoding on demand.

Why it is shaped like this: the next offset to fetch is known from the batch headers alone, so each
loop sends its next Fetch as soon as a response arrives, and the broker reads the next chunk while
the user's ``poll`` decodes this one (aiokafka and Kafka's Java client wait until a partition's
buffered data is consumed). At most :data:`MAX_BUFFERED_CHUNKS` responses are held per partition.
Records come back as lists per partition, decoded a whole batch at a time by the Cython reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from kafka.protocol.consumer import FetchRequest

from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.metrics import ConsumerMetrics
from onceflow.client.consumer.position_validation import (
    LogTruncation,
    Outcome,
    build_request,
    judge,
    needs_validation,
)
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.consumer.subscription_state import PartitionState, SubscriptionState
from onceflow.client.fetch_records import READ_COMMITTED, AbortedTransactions
from onceflow.protocol.errors import ErrorCode, KafkaError, OffsetOutOfRange
from onceflow.protocol.record_codec import decode_control, decode_record_objects, split_batches
from onceflow.protocol.records import BATCH_HEADER_SIZE, read_header

log = logging.getLogger(__name__)

# Per partition: one being consumed, two ready (plus one in flight). With two, a poll that takes
# 10,000 records emptied the buffer and waited on the broker's next answer; three kept the broker
# busy while we decode (300k x 1 KB, one partition, fresh processes, medians of 4: 2 -> ~190k,
# 3 -> ~256k, 4 -> ~260k, 8 -> ~200k rec/s); each chunk is at most max.partition.fetch.bytes.
MAX_BUFFERED_CHUNKS = 3
_METADATA_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
)


def batch_epochs(records: bytes | memoryview) -> list[tuple[int, int]]:
    """``(last offset, partition leader epoch)`` of every whole batch in ``records``."""
    out = []
    pos = 0
    end = len(records)
    while end - pos >= BATCH_HEADER_SIZE:
        header = read_header(records, pos)
        if pos + header.size > end:
            break
        out.append((header.last_offset, header.partition_leader_epoch))
        pos += header.size
    return out


def next_offset_after(records: bytes | memoryview, fetch_offset: int) -> int:
    """The offset after the last complete batch in a fetched record set (headers only, no decoding)."""
    view = memoryview(records)
    pos, end, next_offset = 0, len(view), fetch_offset
    while end - pos >= BATCH_HEADER_SIZE:
        header = read_header(view, pos)
        if pos + header.size > end:
            break
        next_offset = header.last_offset + 1
        pos += header.size
    return max(next_offset, fetch_offset)


@dataclass(slots=True)
class CompletedFetch:
    """One partition's data from one Fetch response, decoded lazily, consumed from the front."""

    epoch: int
    fetch_offset: int
    next_offset: int
    raw: bytes | None
    aborted_transactions: list[tuple[int, int]]
    records: list | None = None
    cursor: int = 0
    size: int = field(default=0)
    # (last offset, partition leader epoch) of each batch, for the position's epoch (KIP-320)
    batch_epochs: list[tuple[int, int]] = field(default_factory=list)

    def epoch_of(self, offset: int) -> int | None:
        """The leader epoch of the batch holding ``offset`` (None if no batch says)."""
        for last, epoch in self.batch_epochs:
            if offset <= last:
                return epoch if epoch >= 0 else None
        return None

    def decode(self, isolation_level: int, check_crcs: bool) -> list:
        if self.records is None:
            self.records = decode_visible(
                self.raw, self.fetch_offset, isolation_level, self.aborted_transactions, check_crcs
            )
            self.raw = None
        return self.records


def decode_visible(
    raw: bytes | None,
    fetch_offset: int,
    isolation_level: int,
    aborted_transactions: list[tuple[int, int]],
    check_crcs: bool = True,
) -> list:
    """The user-visible records of a fetched record set, in offset order.

    Records are the Cython reader's own objects (``offset``, ``timestamp``, ``key``, ``value``,
    ``headers``), one object per record and no per-record Python code: building a ``Record`` tuple
    for each cost as much as decoding it. Batches are filtered on their headers (control batches are
    decoded only under read_committed, for their markers)."""
    if not raw:
        return []
    aborted = AbortedTransactions(aborted_transactions) if isolation_level == READ_COMMITTED else None
    out: list = []
    for header, batch in split_batches(raw, check_crc=check_crcs):
        if header.is_control:
            if aborted is not None:
                aborted.is_aborted(header, decode_control(header, batch))
            continue
        if aborted is not None and aborted.is_aborted(header):
            continue
        records = decode_record_objects(header, batch)
        if header.base_offset >= fetch_offset:
            out.extend(records)
        else:  # the broker returns whole batches: skip records before the offset asked for
            out.extend(r for r in records if r.offset >= fetch_offset)
    return out


class Fetcher:
    """Background fetch loops plus :meth:`drain` for ``poll``. Needs a running event loop to start."""

    def __init__(
        self,
        config: ConsumerConfig,
        client: AsyncClient,
        subscriptions: SubscriptionState,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else ConsumerMetrics(config.client_id)
        self.client = client
        self.subscriptions = subscriptions
        self.isolation_level = config.isolation_level_code
        self._buffers: dict[TopicPartition, deque[CompletedFetch]] = {}
        self._loops: dict[int, asyncio.Task] = {}
        self._connections: dict[int, Connection] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._leader_epochs: dict[TopicPartition, int] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self.data_ready = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._metadata_stale = True
        self._drain_start = 0
        self._closed = False
        # Nodes whose last fetch failed, and whether the last metadata refresh did: an outage is
        # logged once at WARNING when it starts and once when it ends, its retries (every
        # retry.backoff.ms) at DEBUG.
        self._failing_nodes: set[int] = set()
        self._refresh_failing = False

    # -- control from the consumer ---------------------------------------------------------------

    def wake(self) -> None:
        """Assignment or positions changed: fetch loops re-plan."""
        self._wakeup.set()

    def invalidate_metadata(self) -> None:
        self._metadata_stale = True
        self._wakeup.set()

    async def ensure_running(self) -> None:
        """Start a fetch loop for every leader of an assigned partition."""
        assigned = self.subscriptions.assigned()
        if self._metadata_stale or any(tp not in self._leaders for tp in assigned):
            await self._refresh_leaders({tp.topic for tp in assigned})
        for node in {self._leaders[tp] for tp in assigned if tp in self._leaders}:
            task = self._loops.get(node)
            if task is None or task.done():
                self._loops[node] = asyncio.get_running_loop().create_task(self._fetch_loop(node))
        self._wakeup.set()

    async def _refresh_leaders(self, topics: set[str]) -> None:
        if not topics:
            return
        metadata = await self.client.metadata(sorted(topics))
        self._brokers = dict(metadata.brokers)
        for topic, info in metadata.topics.items():
            for p, pinfo in info.partitions.items():
                if pinfo.leader >= 0:
                    tp = TopicPartition(topic, p)
                    self._leaders[tp] = pinfo.leader
                    self._note_leader_epoch(tp, pinfo.leader_epoch)
        self._metadata_stale = False

    def _note_leader_epoch(self, tp: TopicPartition, leader_epoch: int) -> None:
        """A (maybe) new leader epoch: an assigned position read under an older one waits for the new
        leader to confirm it (KIP-320)."""
        self._leader_epochs[tp] = leader_epoch
        st = self.subscriptions.partitions.get(tp)
        if st is None or leader_epoch <= st.leader_epoch:
            return
        if needs_validation(st, leader_epoch):
            st.awaiting_validation = True
        st.leader_epoch = leader_epoch

    async def close(self) -> None:
        self._closed = True
        loops, self._loops = self._loops, {}
        for task in loops.values():
            task.cancel()
        await asyncio.gather(*loops.values(), return_exceptions=True)
        conns, self._connections = self._connections, {}
        await asyncio.gather(*(c.close() for c in conns.values()), return_exceptions=True)

    def clear_buffers(self, partitions: list[TopicPartition] | None = None) -> None:
        if partitions is None:
            self._buffers.clear()
        else:
            for tp in partitions:
                self._buffers.pop(tp, None)

    # -- the fetch loop --------------------------------------------------------------------------

    def _fetchable(self, node: int) -> list[tuple[TopicPartition, PartitionState]]:
        out = []
        for tp, st in self.subscriptions.partitions.items():
            if st.paused or st.fetch_offset is None or st.error is not None or st.awaiting_validation:
                continue
            if self._leaders.get(tp) != node:
                continue
            buffered = self._buffers.get(tp)
            if buffered is not None and len(buffered) >= MAX_BUFFERED_CHUNKS:
                continue
            out.append((tp, st))
        return out

    async def _fetch_loop(self, node: int) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while not self._closed:
            if not await self._validate_positions(node):
                await asyncio.sleep(backoff)
                await self._refresh_quietly()
                continue
            partitions = self._fetchable(node)
            if not partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                conn = await self._connection(node)
                request = self._build_request(partitions)
                sent = {tp: (st.epoch, st.fetch_offset) for tp, st in partitions}
                started = time.monotonic()
                response = await conn.send(request)
                if node in self._failing_nodes:
                    self._failing_nodes.discard(node)
                    log.info("fetch from node %d works again", node)
            except (BrokerConnectionError, KafkaError, OSError) as exc:
                level = logging.DEBUG if node in self._failing_nodes else logging.WARNING
                self._failing_nodes.add(node)
                log.log(level, "fetch from node %d failed: %s; retrying after metadata refresh", node, exc)
                self._drop_connection(node)
                self._metadata_stale = True
                await asyncio.sleep(backoff)
                await self._refresh_quietly()
                continue
            size = self._handle_response(response, sent)
            self.metrics.fetched(started, time.monotonic(), max(size, 0))
            if size < 0:
                await asyncio.sleep(backoff)
                await self._refresh_quietly()

    async def _validate_positions(self, node: int) -> bool:
        """Ask ``node`` to confirm the positions that wait for it (KIP-320); False to back off."""
        waiting = [
            (tp, st)
            for tp, st in self.subscriptions.partitions.items()
            if st.awaiting_validation and self._leaders.get(tp) == node and st.position is not None
        ]
        if not waiting:
            return True
        try:
            conn = await self._connection(node)
            response = await conn.send(build_request(waiting))
        except (BrokerConnectionError, KafkaError, OSError) as exc:
            log.info("validating positions with node %d failed: %s", node, exc)
            self._drop_connection(node)
            self._metadata_stale = True
            return False
        sent = {tp: (st.epoch, st.position) for tp, st in waiting}
        retry = False
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                st = self.subscriptions.partitions.get(tp)
                if st is None or tp not in sent or sent[tp][0] != st.epoch or not st.awaiting_validation:
                    continue
                verdict = judge(
                    sent[tp][1],
                    ErrorCode(p.error_code),
                    p.leader_epoch,
                    p.end_offset,
                    self.config.auto_offset_reset,
                )
                retry = retry or self._apply_validation(tp, st, verdict)
        return not retry

    def _apply_validation(self, tp: TopicPartition, st: PartitionState, verdict) -> bool:
        """Act on a validation verdict; True when it must be asked again."""
        if verdict.outcome is Outcome.RETRY:
            self._metadata_stale = True
            return True
        if verdict.outcome is Outcome.VALID:
            st.awaiting_validation = False
        elif verdict.outcome is Outcome.SEEK:
            log.warning(
                "%s-%d: the log was truncated below the position %s (leader epoch %d ends at %d); "
                "continuing from %d",
                tp.topic,
                tp.partition,
                st.position,
                verdict.epoch,
                verdict.offset,
                verdict.offset,
            )
            st.seek(verdict.offset, verdict.epoch)
            self._buffers.pop(tp, None)
        elif verdict.outcome is Outcome.RESET:
            log.warning("%s-%d: the leader has no epoch of the position; resetting", tp.topic, tp.partition)
            st.request_reset(self.config.auto_offset_reset)
            self._buffers.pop(tp, None)
        else:
            st.error = LogTruncation(
                f"the log of {tp.topic}-{tp.partition} was truncated below the position {st.position} "
                f"(diverging at {verdict.offset if verdict.offset >= 0 else 'an unknown offset'}) and "
                "auto.offset.reset=none: seek() to go on",
                verdict.offset if verdict.offset >= 0 else None,
            )
            st.awaiting_validation = False
        self.data_ready.set()
        return False

    async def _refresh_quietly(self) -> None:
        try:
            await self._refresh_leaders({tp.topic for tp in self.subscriptions.assigned()})
        except (KafkaError, OSError) as exc:
            log.log(
                logging.DEBUG if self._refresh_failing else logging.WARNING,
                "metadata refresh failed: %s",
                exc,
            )
            self._refresh_failing = True
        else:
            self._refresh_failing = False

    async def _connection(self, node: int) -> Connection:
        conn = self._connections.get(node)
        if conn is None or conn.closed:
            if conn is not None:
                del self._connections[node]
                await conn.close()  # failed: its socket is gone already; this reaps its read loop
            if node not in self._brokers:
                raise KafkaError(f"no address known for broker {node}", ErrorCode.LEADER_NOT_AVAILABLE)
            host, port = self._brokers[node]
            conn = await Connection.open(
                host,
                port,
                client_id=self.config.client_id,
                security=self.config.security,
                request_timeout_s=(self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000,
            )
            self._connections[node] = conn
        return conn

    def _drop_connection(self, node: int) -> None:
        conn = self._connections.pop(node, None)
        if conn is not None:
            asyncio.get_running_loop().create_task(conn.close())

    def _build_request(self, partitions: list[tuple[TopicPartition, PartitionState]]) -> FetchRequest:
        by_topic: dict[str, list] = {}
        for tp, st in partitions:
            by_topic.setdefault(tp.topic, []).append(
                FetchRequest.FetchTopic.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=st.leader_epoch,
                    fetch_offset=st.fetch_offset,
                    partition_max_bytes=self.config.max_partition_fetch_bytes,
                )
            )
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
            isolation_level=self.isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[],
            rack_id="",
        )

    def _handle_response(self, response, sent: dict[TopicPartition, tuple[int, int]]) -> int:
        """Buffer the data; the bytes of record data buffered, or -1 when an error asks for a
        metadata refresh and a backoff."""
        top_error = getattr(response, "error_code", 0)
        if top_error:
            log.warning("fetch failed: %s", ErrorCode(top_error).name)
            return -1
        needs_refresh = False
        got_data = False
        size = 0
        for topic_response in response.responses:
            for p in topic_response.partitions:
                tp = TopicPartition(topic_response.topic, p.partition_index)
                st = self.subscriptions.partitions.get(tp)
                if st is None or tp not in sent or sent[tp][0] != st.epoch:
                    continue  # unassigned or sought since the request went out
                fetch_offset = sent[tp][1]
                code = p.error_code
                if code == ErrorCode.NONE:
                    st.high_watermark = p.high_watermark
                    st.last_stable_offset = p.last_stable_offset
                    st.log_start_offset = p.log_start_offset
                    records = p.records
                    if not records:
                        continue
                    next_offset = next_offset_after(records, fetch_offset)
                    if next_offset == fetch_offset:
                        continue  # only a partial batch: ask again (KIP-74 brokers send one whole batch)
                    aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()]
                    chunk = CompletedFetch(
                        st.epoch,
                        fetch_offset,
                        next_offset,
                        records,
                        aborted,
                        size=len(records),
                        batch_epochs=batch_epochs(records),
                    )
                    self._buffers.setdefault(tp, deque()).append(chunk)
                    st.fetch_offset = next_offset
                    size += len(records)
                    got_data = True
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, st, fetch_offset)
                elif code in _METADATA_ERRORS:
                    log.info(
                        "fetch %s-%d: %s; refreshing metadata", tp.topic, tp.partition, ErrorCode(code).name
                    )
                    needs_refresh = True
                else:
                    st.error = KafkaError(
                        f"fetch from {tp.topic}-{tp.partition} failed: {ErrorCode(code).name}",
                        ErrorCode(code),
                    )
                    got_data = True  # wake poll so the error surfaces
        if got_data:
            self.data_ready.set()
        return -1 if needs_refresh else size

    def _out_of_range(self, tp: TopicPartition, st: PartitionState, offset: int) -> None:
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            st.error = OffsetOutOfRange(
                f"offset {offset} is out of range for {tp.topic}-{tp.partition} and auto.offset.reset=none: "
                "seek() to a valid offset"
            )
            self.data_ready.set()
        else:
            log.info(
                "offset %d out of range for %s-%d; resetting to %s", offset, tp.topic, tp.partition, strategy
            )
            st.request_reset(strategy)
            self._buffers.pop(tp, None)
            self.data_ready.set()  # poll() performs the reset

    # -- what poll() takes -----------------------------------------------------------------------

    def drain(self, max_records: int, only: set[TopicPartition] | None = None) -> dict[TopicPartition, list]:
        """Up to ``max_records`` buffered records, partitions served in turn; advances positions."""
        result: dict[TopicPartition, list] = {}
        assigned = list(self.subscriptions.partitions.items())
        n = len(assigned)
        remaining = max_records
        start = self._drain_start
        for i in range(n):
            if remaining <= 0:
                break
            tp, st = assigned[(start + i) % n]
            if st.error is not None:
                error, st.error = st.error, None
                raise error
            buffered = self._buffers.get(tp)
            if not buffered or st.paused or st.position is None or (only is not None and tp not in only):
                continue
            taken: list | None = None
            size = 0
            while buffered and remaining > 0:
                chunk = buffered[0]
                if chunk.epoch != st.epoch:
                    buffered.popleft()
                    continue
                records = chunk.decode(self.isolation_level, self.config.check_crcs)
                if chunk.cursor == 0 and len(records) <= remaining:
                    part = records  # the whole decoded list, no copy (the chunk is done with it)
                else:
                    part = records[chunk.cursor : chunk.cursor + remaining]
                chunk.cursor += len(part)
                if part:
                    if taken is None:
                        taken = part
                    else:
                        taken.extend(part)
                    st.position = part[-1].offset + 1
                    st.offset_epoch = chunk.epoch_of(part[-1].offset)
                    remaining -= len(part)
                if chunk.cursor >= len(records):
                    buffered.popleft()
                    size += chunk.size
                    if chunk.next_offset > st.position:
                        st.position = chunk.next_offset
                        st.offset_epoch = chunk.epoch_of(chunk.next_offset - 1)
                    self._wakeup.set()  # room in the buffer: fetch more
            if taken:
                result[tp] = taken
                self._record_consumed(tp, st, len(taken), size)
            self._drain_start = (start + i + 1) % n
        if not any(self._buffers.values()):
            self.data_ready.clear()
        return result

    def _record_consumed(self, tp: TopicPartition, st: PartitionState, records: int, size: int) -> None:
        """Kafka's FetchCollector metrics of one partition in one poll: records and bytes handed out,
        and the lag (to the high watermark, the LSO under read_committed) and lead (over the log
        start) of the position reached."""
        end = st.last_stable_offset if self.isolation_level == READ_COMMITTED else st.high_watermark
        lag = max(end - st.position, 0) if end >= 0 else -1
        lead = st.position - st.log_start_offset if st.log_start_offset >= 0 else -1
        self.metrics.consumed(tp, records, size, lag, lead, time.monotonic())

    def has_buffered(self) -> bool:
        return any(self._buffers.values())
