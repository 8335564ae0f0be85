"""AddPartitionsToTxn (24): partitions join a producer's transaction before it writes to them.

v0-3 are the client's form (one transaction). v4+ batch transactions and carry ``verify_only``
(KIP-890 part 1: a broker asks whether a partition is already in a transaction before it accepts a
transactional write); v4+ are meant for brokers, and a verify answers per partition without writing.

Authorization (Kafka's): v0-3 need WRITE on the transactional id (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic but the internal ones (else the transaction
adds nothing: those partitions are TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED);
v4+ need CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the request).
"""

from __future__ import annotations

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import (
    CLUSTER,
    CLUSTER_ACTION,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    allowed_names,
    authorize,
)
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.broker.txn.errors import wire_code
from onceflow.broker.txn.metadata import TV_0, TV_2
from onceflow.protocol.errors import ErrorCode, KafkaError

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = AddPartitionsToTxnRequest
FIRST_BATCHED_VERSION = 4

_Result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t.name, p) for t in topics or [] for p in t.partitions or []]


def _topic_results(codes: dict[tuple[str, int], ErrorCode]) -> list[_TopicResult]:
    by_topic: dict[str, list[_PartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            _PartitionResult(partition_index=partition, partition_error_code=int(code))
        )
    return [_TopicResult(name=name, results_by_partition=results) for name, results in by_topic.items()]


def _refusals(ctx: RequestContext, tid: str, wanted: list[tuple[str, int]]) -> dict | None:
    """Kafka's checks of the client versions (v0-3), before anything is added."""
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    writable = allowed_names(ctx, WRITE, TOPIC, (t for t, _ in wanted if t not in INTERNAL_TOPICS))
    if writable is None:
        return None
    denied = {tp for tp in wanted if tp[0] not in INTERNAL_TOPICS and tp[0] not in writable}
    if not denied:
        return None
    return {
        tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
        for tp in wanted
    }


async def _add(
    ctx: RequestContext, tid: str, pid: int, epoch: int, topics, verify_only: bool, batched: bool = False
):
    wanted = _partitions(topics)
    if ctx.api_version < FIRST_BATCHED_VERSION:
        refused = _refusals(ctx, tid, wanted)
        if refused is not None:
            return refused
    coordinator = ctx.transactions.coordinator
    if verify_only:
        return coordinator.verify_partitions_in_txn(tid, pid, epoch, wanted)
    unknown = [tp for tp in wanted if not _exists(ctx, *tp)]
    if unknown:
        # Kafka: the unknown partitions get UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    try:
        # v4+ without verify_only comes from a partition leader adding for a produce of transaction
        # protocol v2 (Kafka's brokers send no other).
        await coordinator.add_partitions_to_txn(
            tid, pid, epoch, wanted, transaction_version=TV_2 if batched else TV_0
        )
    except KafkaError as exc:
        return dict.fromkeys(wanted, wire_code(exc, API_KEY, ctx.api_version))
    return dict.fromkeys(wanted, ErrorCode.NONE)


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    t = ctx.topics.get(topic)
    return t is not None and 0 <= partition < len(t.partitions)


async def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    if ctx.api_version < FIRST_BATCHED_VERSION:
        codes = await _add(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
        )
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes)
        )
    if not authorize(ctx, CLUSTER_ACTION, CLUSTER):
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            results_by_transaction=[],
        )
    results = []
    for txn in request.transactions or []:
        codes = await _add(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            bool(txn.verify_only),
            batched=True,
        )
        results.append(_Result(transactional_id=txn.transactional_id, topic_results=_topic_results(codes)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=results)
