"""Fetch (1): read whole record batches from partition logs, long-polling until ``min_bytes`` arrive.

Limits (KIP-74): ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each partition,
except that the first partition with data always returns at least one whole batch, so a consumer
never gets stuck behind a batch larger than its limits.

The wait ends when the data read reaches ``min_bytes``, when ``max_wait_ms`` passes, or at once when
a partition has an error (Kafka's delayed-fetch rules). Appends wake the waiting fetches through the
partitions' waiter sets.

Fetch sessions (KIP-227) are not kept: every session is "sessionless", which Kafka's rules allow and
clients handle. A full fetch (epoch 0 or -1) is served with ``session_id`` 0, which tells the client
no session was created so its next fetch is full again; an incremental fetch (epoch > 0) names a
session we do not have and gets FETCH_SESSION_ID_NOT_FOUND, after which clients fall back to full.
"""

from __future__ import annotations

import asyncio
import logging

from kafka.protocol.consumer import FetchRequest, FetchResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.topics import Partition
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

log = logging.getLogger(__name__)

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17
REQUEST = FetchRequest

READ_COMMITTED = 1
NO_SESSION = 0
_TopicResponse = FetchResponse.FetchableTopicResponse
_PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
_AbortedTxn = _PartitionData.AbortedTransaction


def _resolve(ctx: RequestContext, topic_req, index: int) -> tuple[Partition | None, ErrorCode]:
    if ctx.api_version >= 13:
        topic = ctx.topics.get_by_id(topic_req.topic_id)
        if topic is None:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        name = topic.name
    else:
        name = topic_req.topic
    try:
        return ctx.topics.get_partition(name, index), ErrorCode.NONE
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
    """One read over every requested partition, within the request's byte limits."""

    def __init__(self, ctx: RequestContext, request: FetchRequest) -> None:
        self.topics: list[_TopicResponse] = []
        self.bytes_read = 0
        self.has_error = False
        self.partitions: list[Partition] = []
        read_committed = request.isolation_level == READ_COMMITTED
        remaining = request.max_bytes
        for topic_req in request.topics:
            results = []
            for part_req in topic_req.partitions:
                partition, code = _resolve(ctx, topic_req, part_req.partition)
                if partition is None:
                    self.has_error = True
                    results.append(_error_partition(part_req.partition, code))
                    continue
                self.partitions.append(partition)
                data = self._read(
                    partition, part_req, min(part_req.partition_max_bytes, remaining), read_committed
                )
                if data.error_code:
                    self.has_error = True
                remaining = max(0, remaining - len(data.records))
                self.bytes_read += len(data.records)
                results.append(data)
            self.topics.append(
                _TopicResponse(topic=topic_req.topic, topic_id=topic_req.topic_id, partitions=results)
            )

    def _read(self, partition: Partition, part_req, limit: int, read_committed: bool) -> _PartitionData:
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
            return _error_partition(part_req.partition, error_code_for(exc))
        return _PartitionData(
            partition_index=part_req.partition,
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
    if ctx.api_version >= 7 and request.session_epoch > 0:
        # An incremental fetch in a session we never created.
        return FetchResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
            session_id=NO_SESSION,
            responses=[],
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000.0
    while True:
        result = _FetchPass(ctx, request)
        remaining = deadline - loop.time()
        if (
            result.has_error
            or result.bytes_read >= request.min_bytes
            or remaining <= 0
            or not result.partitions
        ):
            break
        await _wait_for_data(loop, result.partitions, remaining)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=NO_SESSION, responses=result.topics)


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
