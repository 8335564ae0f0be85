"""TxnOffsetCommit (28): a transactional producer commits a consumer group's offsets inside its
transaction (``sendOffsetsToTransaction``). The offsets are written to ``__consumer_offsets`` as the
producer's transactional batch and stay pending until the commit marker (an abort drops them).

Checks, in Kafka's order: the producer's transaction must hold the group's ``__consumer_offsets``
partition (AddOffsetsToTxn; with v5, transaction protocol v2, it is added here implicitly); then
KIP-447 fencing on the group (v3+: a member of an old generation gets ILLEGAL_GENERATION, a replaced
static member FENCED_INSTANCE_ID, an unknown one UNKNOWN_MEMBER_ID; a generation for a group that
does not exist is ILLEGAL_GENERATION, never OffsetCommit v9's GROUP_ID_NOT_FOUND). A group completing
a rebalance does not refuse the commit (Kafka's rule: only OffsetCommit answers REBALANCE_IN_PROGRESS).

Authorization first (Kafka's): WRITE on the transactional id (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED), READ on
each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED and not committed).
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.group.handler_support import offset_commit_topics, requested_offsets
from onceflow.broker.security.access import (
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    allowed_names,
    authorize,
)
from onceflow.broker.txn.errors import fenced_error_code, wire_code
from onceflow.broker.txn.metadata import TV_2
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC
from onceflow.protocol.transaction_versions import FIRST_TV2_TXN_OFFSET_COMMIT_VERSION

log = logging.getLogger(__name__)

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = TxnOffsetCommitRequest
FIRST_MEMBER_VERSION = 3  # generation, member id and instance id (KIP-447)

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


async def _check_transaction(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode:
    coordinator = ctx.transactions.coordinator
    tid, pid, epoch = request.transactional_id, request.producer_id, request.producer_epoch
    router = ctx.txn_router
    if router is not None and not router.is_local(tid):
        return await _check_remote_transaction(ctx, router, request)
    if ctx.api_version >= FIRST_TV2_TXN_OFFSET_COMMIT_VERSION:
        try:
            await coordinator.add_offsets_to_txn(tid, pid, epoch, request.group_id, TV_2)
        except KafkaError as exc:
            return wire_code(exc, API_KEY, ctx.api_version)
        return ErrorCode.NONE
    partition = ctx.groups.partition_for(request.group_id)
    code = coordinator.verify_partitions_in_txn(tid, pid, epoch, [(CONSUMER_OFFSETS_TOPIC, partition)])[
        (CONSUMER_OFFSETS_TOPIC, partition)
    ]
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.INVALID_TXN_STATE  # not added with AddOffsetsToTxn first (KIP-890 part 1)
    if code == ErrorCode.PRODUCER_FENCED:
        return fenced_error_code(API_KEY, ctx.api_version)
    return code


async def _check_remote_transaction(
    ctx: RequestContext, router, request: TxnOffsetCommitRequest
) -> ErrorCode:
    """The transaction's coordinator is another broker of the cluster: ask it (AddPartitionsToTxn v5,
    as Kafka's group coordinator does through its AddPartitionsToTxnManager) to add the group's
    ``__consumer_offsets`` partition (transaction protocol v2) or to verify it is in the transaction."""
    partition = (CONSUMER_OFFSETS_TOPIC, ctx.groups.partition_for(request.group_id))
    tv2 = ctx.api_version >= FIRST_TV2_TXN_OFFSET_COMMIT_VERSION
    codes = await router.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [partition],
        verify_only=not tv2,
    )
    code = codes[partition]
    if code == ErrorCode.TRANSACTION_ABORTABLE and not tv2:
        return ErrorCode.INVALID_TXN_STATE  # not added with AddOffsetsToTxn first (KIP-890 part 1)
    if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        return fenced_error_code(API_KEY, ctx.api_version)
    return code


async def _commit(ctx: RequestContext, request: TxnOffsetCommitRequest, offsets) -> tuple[ErrorCode, dict]:
    code = await _check_transaction(ctx, request)
    if code is not ErrorCode.NONE:
        return code, {}
    try:
        if ctx.api_version >= FIRST_MEMBER_VERSION:
            code = ctx.groups.check_txn_member(
                request.group_id, request.member_id, request.group_instance_id, request.generation_id
            )
            if code is not ErrorCode.NONE:
                return code, {}
        return ErrorCode.NONE, await ctx.groups.commit_txn_offsets(
            request.group_id, request.producer_id, request.producer_epoch, offsets
        )
    except KafkaError as exc:
        return error_code_for(exc), {}
    except OSError:
        log.exception("transactional offset commit of group %s failed", request.group_id)
        return ErrorCode.KAFKA_STORAGE_ERROR, {}


async def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    offsets = requested_offsets(request, with_leader_epoch=ctx.api_version >= 2)
    denied: dict = {}
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        top, per_partition = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, {}
    elif not authorize(ctx, READ, GROUP, request.group_id):
        top, per_partition = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    else:
        readable = allowed_names(ctx, READ, TOPIC, (t.name for t in request.topics or []))
        if readable is not None:
            denied = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in offsets if tp[0] not in readable}
            offsets = {tp: entry for tp, entry in offsets.items() if tp not in denied}
        if denied and not offsets:
            top, per_partition = ErrorCode.NONE, {}
        else:
            top, per_partition = await _commit(ctx, request, offsets)
    per_partition = {**per_partition, **denied}
    topics = offset_commit_topics(request, top, per_partition, _Topic, _Partition)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)
