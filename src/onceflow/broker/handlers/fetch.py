"""Fetch (1): read whole record batches from partition logs, long-polling until ``min_bytes`` arrive.

Limits (KIP-74): ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each partition,
except that the first partition with data always returns at least one whole batch, so a consumer
never gets stuck behind a batch larger than its limits.

The wait ends when the data read reaches ``min_bytes``, when ``max_wait_ms`` passes, or at once when
a partition has an error (Kafka's delayed-fetch rules). Appends wake the waiting fetches through the
partitions' waiter sets.

Fetch sessions (KIP-227): the request's session id and epoch go to the broker's
``FetchSessionCache`` (``ctx.fetch_sessions``, module ``onceflow.broker.fetch_session``), which says
which partitions to read (the request's, or all of an incremental fetch's session) and, once read,
what to answer: every partition and maybe a new session id for a full fetch, only the partitions
with something to say for an incremental one, or a session error at once. Fetch v4-6 have no
session fields and are served sessionless, as Kafka's ``FetchMetadata.LEGACY``.

Authorization (Kafka's): a consumer needs READ on each topic it fetches, a follower (replica id >= 0)
CLUSTER_ACTION on the cluster; a partition it may not read is answered TOPIC_AUTHORIZATION_FAILED
at once, with the session's other partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kafka.protocol.consumer import FetchRequest, FetchResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionKey,
    PartitionRequest,
    SessionRequest,
)
from onceflow.broker.replica import follower_fetch
from onceflow.broker.replica.partition import leader_epoch_error
from onceflow.broker.security.access import CLUSTER, CLUSTER_ACTION, READ, TOPIC, allowed_names, authorize
from onceflow.broker.topics import Partition
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

log = logging.getLogger(__name__)

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17
REQUEST = FetchRequest

READ_COMMITTED = 1
_TopicResponse = FetchResponse.FetchableTopicResponse
_PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
_AbortedTxn = _PartitionData.AbortedTransaction


def _replica_id(version: int, request: FetchRequest) -> int:
    """The follower's broker id, or -1 for a consumer."""
    if version >= 15:
        return request.replica_state.replica_id if request.replica_state is not None else -1
    return request.replica_id


def is_from_follower(version: int, request: FetchRequest) -> bool:
    """A follower's fetch (its broker id as replica id), which the request metrics name FetchFollower,
    as Kafka's; a consumer's (-1, or -2 for a debug consumer) is FetchConsumer."""
    return _replica_id(version, request) >= 0


def _session_request(version: int, request: FetchRequest) -> SessionRequest:
    """The session metadata and partitions of a request; v13+ name topics by id, older by name."""
    uses_topic_ids = version >= 13
    partitions: dict[PartitionKey, PartitionRequest] = {}
    for topic_req in request.topics:
        topic = topic_req.topic_id if uses_topic_ids else topic_req.topic
        for p in topic_req.partitions:
            partitions[(topic, p.partition)] = PartitionRequest(
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
                p.last_fetched_epoch,
                p.log_start_offset,
            )
    replica_id = _replica_id(version, request)
    if version < 7:  # no session fields: sessionless, Kafka's FetchMetadata.LEGACY
        return SessionRequest(INVALID_SESSION_ID, FINAL_EPOCH, False, replica_id >= 0, partitions)
    forgotten = [
        (ft.topic_id if uses_topic_ids else ft.topic, index)
        for ft in request.forgotten_topics_data or ()
        for index in ft.partitions
    ]
    return SessionRequest(
        request.session_id, request.session_epoch, uses_topic_ids, replica_id >= 0, partitions, forgotten
    )


def _resolve(ctx: RequestContext, key: PartitionKey, by_id: bool) -> tuple[Partition | None, ErrorCode]:
    topic, index = key
    if by_id:
        found = ctx.topics.get_by_id(topic)
        if found is None:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        topic = found.name
    try:
        return ctx.topics.get_partition(topic, index), ErrorCode.NONE
    except KafkaError as exc:
        return None, error_code_for(exc)


def _error_partition(index: int, code: ErrorCode) -> _PartitionData:
    return _PartitionData(
        partition_index=index,
        error_code=int(code),
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


class _FetchPass:
    """One read over the partitions of a fetch context, in its order, within the request's byte limits."""

    def __init__(
        self,
        ctx: RequestContext,
        request: FetchRequest,
        to_read: list[tuple[PartitionKey, PartitionRequest]],
        by_id: bool,
        unreadable: frozenset = frozenset(),
    ) -> None:
        self.results: list[tuple[PartitionKey, _PartitionData]] = []
        self.bytes_read = 0
        self.has_error = False
        self.partitions: list[Partition] = []
        read_committed = request.isolation_level == READ_COMMITTED
        remaining = request.max_bytes
        for key, part_req in to_read:
            if key[0] in unreadable:
                self.has_error = True
                self.results.append((key, _error_partition(key[1], ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
                continue
            partition, code = _resolve(ctx, key, by_id)
            if partition is None:
                self.has_error = True
                self.results.append((key, _error_partition(key[1], code)))
                continue
            self.partitions.append(partition)
            data = self._read(
                partition, key[1], part_req, min(part_req.partition_max_bytes, remaining), read_committed
            )
            if data.error_code:
                self.has_error = True
            remaining = max(0, remaining - len(data.records))
            self.bytes_read += len(data.records)
            self.results.append((key, data))

    def _read(
        self, partition: Partition, index: int, part_req: PartitionRequest, limit: int, read_committed: bool
    ) -> _PartitionData:
        epoch_error = leader_epoch_error(part_req.current_leader_epoch, partition.leader_epoch)
        if epoch_error:  # KIP-320: the consumer's leader is another epoch's
            return _error_partition(index, epoch_error)
        plog = partition.log
        upper = plog.last_stable_offset if read_committed else plog.high_watermark
        records = b""
        try:
            if limit > 0 or self.bytes_read == 0:
                records = plog.read(
                    part_req.fetch_offset,
                    limit,
                    max_offset=upper,
                    min_one_batch=self.bytes_read == 0,  # KIP-74: only the first partition with data
                )
        except KafkaError as exc:
            # Kafka answers a failed read without offsets (-1), only the error.
            return _error_partition(index, error_code_for(exc))
        return _PartitionData(
            partition_index=index,
            error_code=0,
            high_watermark=plog.high_watermark,
            last_stable_offset=plog.last_stable_offset,
            log_start_offset=plog.log_start_offset,
            aborted_transactions=_aborted(plog, part_req.fetch_offset, upper, records)
            if read_committed
            else None,
            preferred_read_replica=-1,
            records=bytes(records),
        )


def _aborted(plog, fetch_offset: int, upper: int, records) -> list[_AbortedTxn]:
    """read_committed: the aborted transactions overlapping the fetched range, from the logs'
    transaction indexes (the consumer drops their records itself)."""
    if not records:
        return []
    return [
        _AbortedTxn(producer_id=t.producer_id, first_offset=t.first_offset)
        for t in plog.collect_aborted_transactions(fetch_offset, upper)
    ]


async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    replication = ctx.services.replication
    if replication is not None and _replica_id(ctx.api_version, request) >= 0:
        return await follower_fetch.serve(replication, request, ctx.api_version)
    session_request = _session_request(ctx.api_version, request)
    context = ctx.fetch_sessions.new_context(session_request, _now_ms())
    if context.error:
        return FetchResponse(
            throttle_time_ms=0, error_code=int(context.error), session_id=INVALID_SESSION_ID, responses=[]
        )
    by_id = session_request.uses_topic_ids
    unreadable = _unreadable(ctx, context.partitions, by_id, session_request.privileged)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000.0
    while True:
        result = _FetchPass(ctx, request, context.partitions, by_id, unreadable)
        remaining = deadline - loop.time()
        if (
            result.has_error
            or result.bytes_read >= request.min_bytes
            or remaining <= 0
            or not result.partitions
        ):
            break
        await _wait_for_data(loop, result.partitions, remaining)
    answer = context.respond(result.results, _now_ms())
    if ctx.services.metrics is not None:  # BrokerTopicMetrics: partitions read, bytes out
        ctx.services.metrics.topics.fetched(result.results, answer.partitions)
    return FetchResponse(
        throttle_time_ms=0,
        error_code=int(answer.error_code),
        session_id=answer.session_id,
        responses=_topic_responses(answer.partitions, by_id),
    )


def _unreadable(ctx: RequestContext, partitions, by_id: bool, from_follower: bool) -> frozenset:
    """The topic keys (names, or ids from v13) of the fetch the principal may not read."""
    if ctx.services.authorizer is None:
        return frozenset()
    keys = {key[0] for key, _ in partitions}
    if from_follower:
        return frozenset() if authorize(ctx, CLUSTER_ACTION, CLUSTER) else frozenset(keys)
    names = {}
    for key in keys:
        topic = ctx.topics.get_by_id(key) if by_id else None
        names[key] = topic.name if topic is not None else (None if by_id else key)
    readable = allowed_names(ctx, READ, TOPIC, names.values()) or frozenset()
    return frozenset(key for key, name in names.items() if name is not None and name not in readable)


def _topic_responses(results: list[tuple[PartitionKey, _PartitionData]], by_id: bool) -> list[_TopicResponse]:
    """Partitions grouped by topic, each run of one topic's partitions in one topic entry (Kafka's
    FetchResponse.of does the same)."""
    topics: list[_TopicResponse] = []
    current: object = None
    for (topic, _), data in results:
        if not topics or topic != current:
            current = topic
            topics.append(
                _TopicResponse(topic="" if by_id else topic, topic_id=topic if by_id else None, partitions=[])
            )
        topics[-1].partitions.append(data)
    return topics


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


async def _wait_for_data(
    loop: asyncio.AbstractEventLoop, partitions: list[Partition], timeout: float
) -> None:
    waiter: asyncio.Future[None] = loop.create_future()
    for partition in partitions:
        partition.add_waiter(waiter)
    try:
        await asyncio.wait_for(waiter, timeout)
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            partition.remove_waiter(waiter)
