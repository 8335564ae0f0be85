"""Produce (0): validate each partition's record batches and append them to the partition's log.

Kafka 4 still advertises Produce v0 (librdkafka needs it, KAFKA-18659) but answers v0-v2, which carry
pre-magic-2 message sets, with UNSUPPORTED_VERSION per partition; we do the same.

Ordering: everything that changes state happens before this handler's first ``await``, so pipelined
produce requests on one connection append in request order (see ``server``).

Authorization (Kafka's): with transactional records, WRITE on the transactional.id, else every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED; WRITE on each topic, else its partitions are
TOPIC_AUTHORIZATION_FAILED (and, with Produce v12+, not added to the transaction).

Faults: ``drop-request-before-append`` ignores the request (no append, no response);
``drop-response-after-append`` appends and sends nothing: librdkafka times the request out and
retries, kafka-python sees the next response's correlation id mismatch, drops the connection and
retries; both are the "lost ACK" of the seed notes. ``disconnect-after-append`` appends and closes
the connection instead, a lost ACK every client notices at once (librdkafka's request timeout is
long), so retries come promptly. ``delay-response`` sleeps before answering.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from onceflow.broker import faults
from onceflow.broker.context import CloseConnection, RequestContext
from onceflow.broker.security.access import TOPIC, TRANSACTIONAL_ID, WRITE, allowed_names, authorize
from onceflow.broker.txn.metadata import TV_2
from onceflow.broker.txn.produce_guard import produce_error, verify_transactional_append
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidRecord,
    InvalidTopic,
    KafkaError,
    NotEnoughReplicas,
    error_code_for,
)
from onceflow.protocol.records import read_header, validate_produce_records
from onceflow.protocol.transaction_versions import FIRST_TV2_PRODUCE_VERSION

log = logging.getLogger(__name__)

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 12
REQUEST = ProduceRequest
FIRST_SUPPORTED_VERSION = 3  # magic-2 record batches

_TopicResponse = ProduceResponse.TopicProduceResponse
_PartitionResponse = ProduceResponse.TopicProduceResponse.PartitionProduceResponse


def _error(index: int, code: ErrorCode, message: str | None = None) -> _PartitionResponse:
    return _PartitionResponse(
        index=index,
        error_code=int(code),
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=message,
    )


def _failed(
    ctx: RequestContext, topic, index: int, code: ErrorCode, message: str | None = None
) -> _PartitionResponse:
    if ctx.services.metrics is not None:  # BrokerTopicMetrics (``topic`` None: one this broker lacks)
        ctx.services.metrics.topics.produce_failed(topic.name if topic is not None else None, code)
    return _error(index, code, message)


def _append_partition(
    ctx: RequestContext,
    topic_name: str | None,
    index: int,
    records,
    transactional_id: str | None = None,
    acks: int = -1,
    timeout_ms: int = 30000,
    waits: list | None = None,
) -> _PartitionResponse:
    """Append one partition's batches now. On a replicated partition an acks=all append adds
    ``(response, future)`` to ``waits``: the future says how the ISR's wait ended."""
    topic = None
    try:
        topic = ctx.topics.get(topic_name) if topic_name is not None else None
        if topic is None:
            return _failed(ctx, None, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if topic.internal:
            raise InvalidTopic(f"cannot produce to internal topic {topic_name}")
        partition = ctx.topics.get_partition(topic_name, index)
        replication = ctx.services.replication
        replicated = replication is not None and partition.replica is not None
        min_insync = partition.log.config.min_insync_replicas
        if acks == -1 and min_insync > 1 and not replicated:
            # One broker: the in-sync replica set is the leader alone (Kafka's Partition check).
            raise NotEnoughReplicas(
                f"The size of the current ISR Set(1) is insufficient to satisfy the min.isr requirement "
                f"of {min_insync} for partition {topic_name}-{index}"
            )
        if not records:
            raise InvalidRecord(f"produce to {topic_name}-{index} has no record batch")
        # The log patches baseOffset (and LogAppendTime fields) in place: the request's own bytes when
        # the connection handed us a writable view of its frame (protocol.produce_records), else a copy.
        writable = isinstance(records, memoryview) and not records.readonly
        batches = validate_produce_records(records if writable else bytearray(records))
        verify_transactional_append(
            ctx.transactions,
            transactional_id,
            topic_name,
            partition,
            batches,
            ctx.api_version,
            ctx.txn_router,
        )
        waiter = None
        if replicated:
            # The leader's append (min.insync.replicas checked before it); acks=all waits after it.
            result, waiter = replication.append_now(
                (topic_name, index), batches, required_acks=acks, timeout_ms=timeout_ms
            )
            partition.notify_new_data()
        else:
            result = partition.append(batches)
    except KafkaError as exc:
        log.debug("produce to %s-%d failed: %s", topic_name, index, exc)
        return _failed(ctx, topic, index, error_code_for(exc), str(exc))
    except OSError as exc:  # a disk problem: Kafka answers KAFKA_STORAGE_ERROR (retriable)
        log.exception("append to %s-%d failed", topic_name, index)
        return _failed(ctx, topic, index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
    if ctx.services.metrics is not None:
        ctx.services.metrics.topics.produced(topic_name, len(records), result)
    response = _PartitionResponse(
        index=index,
        error_code=0,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time,
        log_start_offset=result.log_start_offset,
        record_errors=[],
        error_message=None,
    )
    if waiter is not None and waits is not None:
        waits.append((response, waiter))
    return response


async def _await_replication(ctx: RequestContext, waits: list) -> None:
    """acks=all: each partition's answer once its ISR has the batches, or the error that ended the
    wait (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT)."""
    for response, waiter in waits:
        error = await waiter
        if error != ErrorCode.NONE:
            response.error_code = int(error)
            response.base_offset = -1
            response.error_message = f"the batch was appended but not replicated to the ISR: {error.name}"
    if waits and ctx.faults.fire(faults.CRASH_AFTER_REPLICATION):
        log.error("fault crash-after-replication: killing the process before answering")
        os.kill(os.getpid(), signal.SIGKILL)


def _has_transactional_records(request: ProduceRequest) -> bool:
    for topic_data in request.topic_data:
        for data in topic_data.partition_data:
            if (
                data.records
                and len(data.records) >= 61
                and read_header(memoryview(data.records)).is_transactional
            ):
                return True
    return False


def _refused(request: ProduceRequest, code: ErrorCode) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            _TopicResponse(name=t.name, partition_responses=[_error(d.index, code) for d in t.partition_data])
            for t in request.topic_data
        ],
        throttle_time_ms=0,
    )


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    if ctx.faults.fire(faults.DROP_REQUEST_BEFORE_APPEND):
        return None
    version = ctx.api_version
    writable = allowed_names(ctx, WRITE, TOPIC, (t.name for t in request.topic_data))  # None: all
    if writable is not None and _has_transactional_records(request):
        tid = request.transactional_id
        if tid is None or not authorize(ctx, WRITE, TRANSACTIONAL_ID, tid):
            if request.acks == 0:
                raise CloseConnection("acks=0 produce refused: not authorized for its transactional.id")
            return _refused(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # KIP-890 part 2: v12+ producers leave adding partitions to the broker (see txn.produce_guard);
    # this awaits only for a transactional request, so idempotent appends keep request order.
    not_added = (
        await add_partitions_for_produce(ctx, request, writable)
        if version >= FIRST_TV2_PRODUCE_VERSION
        else {}
    )
    responses = []
    waits: list = []
    for topic_data in request.topic_data:
        name = topic_data.name
        partitions = []
        denied = writable is not None and name not in writable
        for data in topic_data.partition_data:
            if denied:
                partitions.append(_error(data.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif version < FIRST_SUPPORTED_VERSION:
                partitions.append(_error(data.index, ErrorCode.UNSUPPORTED_VERSION))
            elif request.acks not in (-1, 0, 1):
                partitions.append(_error(data.index, ErrorCode.INVALID_REQUIRED_ACKS))
            else:
                rejected = not_added.get((name, data.index))
                if rejected is not None:
                    partitions.append(_error(data.index, rejected.code, str(rejected)))
                    continue
                partitions.append(
                    _append_partition(
                        ctx,
                        name,
                        data.index,
                        data.records,
                        request.transactional_id,
                        request.acks,
                        request.timeout_ms,
                        waits,
                    )
                )
        responses.append(_TopicResponse(name=name, partition_responses=partitions))
    await _await_replication(ctx, waits)

    if request.acks == 0:
        if any(p.error_code for r in responses for p in r.partition_responses):
            # Kafka closes the connection: an acks=0 client has no other way to learn of the failure.
            raise CloseConnection("acks=0 produce failed")
        return None
    if ctx.faults.fire(faults.DROP_RESPONSE_AFTER_APPEND):
        return None
    if ctx.faults.fire(faults.DISCONNECT_AFTER_APPEND):
        raise CloseConnection("fault disconnect-after-append")
    if ctx.faults.fire(faults.DELAY_RESPONSE):
        await asyncio.sleep(ctx.faults.delay_response_s)
    return ProduceResponse(responses=responses, throttle_time_ms=0)


async def add_partitions_for_produce(
    ctx: RequestContext, request: ProduceRequest, writable: frozenset[str] | None = None
) -> dict[tuple[str, int], KafkaError]:
    """Produce v12+: add every partition with transactional batches to the producer's transaction
    (TV_2), of the topics in ``writable`` if given (the others are not authorized); returns the error
    for partitions that could not be added."""
    transactional_id = request.transactional_id
    if not transactional_id:
        return {}
    wanted: list[tuple[str, int]] = []
    producer: tuple[int, int] | None = None
    for topic_data in request.topic_data:
        if writable is not None and topic_data.name not in writable:
            continue
        for data in topic_data.partition_data:
            if not data.records or len(data.records) < 61:
                continue
            header = read_header(memoryview(data.records))
            if header.is_transactional:
                wanted.append((topic_data.name, data.index))
                producer = (header.producer_id, header.producer_epoch)
    if not wanted or producer is None:
        return {}
    router = ctx.txn_router
    if router is not None and not router.is_local(transactional_id):
        codes = await router.add_partitions(transactional_id, producer[0], producer[1], wanted)
        return {
            tp: produce_error(code, f"{tp[0]}-{tp[1]}: {code.name}", FIRST_TV2_PRODUCE_VERSION)
            for tp, code in codes.items()
            if code != ErrorCode.NONE
        }
    try:
        await ctx.transactions.coordinator.add_partitions_to_txn(
            transactional_id, producer[0], producer[1], wanted, transaction_version=TV_2
        )
    except KafkaError as exc:
        error = produce_error(error_code_for(exc), str(exc), FIRST_TV2_PRODUCE_VERSION)
        return dict.fromkeys(wanted, error)
    return {}
