"""InitProducerId (22): a producer id and epoch for an idempotent (or transactional) producer.

Without a transactional id, Kafka's coordinator blindly hands out a fresh producer id at epoch 0 from
the broker's ``ProducerIdManager`` (ids are allocated in persisted blocks, so they never repeat, also
across restarts); the producer id and epoch a v3+ client sends (KIP-360) are ignored, as in Kafka.

With a transactional id the request belongs to the transaction coordinator, which answers
COORDINATOR_LOAD_IN_PROGRESS while the id's ``__transaction_state`` partition loads and NOT_COORDINATOR
when this broker does not own it (clients retry both).

v6 adds two-phase commit (KIP-939): ``Enable2Pc`` makes the id's transactions timeless (refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the broker's ``transaction.two.phase.commit.enable``),
and ``KeepPreparedTxn`` keeps the id's open two-phase commit transaction instead of aborting it,
answering the producer id and epoch that wrote it in ``OngoingTxnProducerId/Epoch`` (-1 when none).
Kafka 4 marks v6 unstable and does not advertise it; onceflow does, as it implements it.

Authorization (Kafka's): WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
without one, IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic (Kafka 3+), else
CLUSTER_AUTHORIZATION_FAILED. Checked before anything else, so a principal without the right cannot
fence another's transactional producer.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import (
    CLUSTER,
    IDEMPOTENT_WRITE,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    authorize,
    authorize_any,
)
from onceflow.broker.txn.errors import wire_code
from onceflow.broker.txn.metadata import ProducerIdAndEpoch
from onceflow.protocol.errors import ErrorCode, InvalidRequest, KafkaError
from onceflow.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

log = logging.getLogger(__name__)

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 6
REQUEST = InitProducerIdRequest


def _response(
    code: ErrorCode,
    producer_id: int = NO_PRODUCER_ID,
    epoch: int = NO_PRODUCER_EPOCH,
    ongoing: ProducerIdAndEpoch | None = None,
):
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=int(code),
        producer_id=producer_id,
        producer_epoch=epoch,
        ongoing_txn_producer_id=ongoing.producer_id if ongoing else NO_PRODUCER_ID,
        ongoing_txn_producer_epoch=ongoing.producer_epoch if ongoing else NO_PRODUCER_EPOCH,
    )


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not authorize(ctx, WRITE, TRANSACTIONAL_ID, transactional_id):
            return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not authorize(ctx, IDEMPOTENT_WRITE, CLUSTER, log_denied=False) and not authorize_any(
        ctx, WRITE, TOPIC
    ):
        return _response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    enable_2pc = ctx.api_version >= 6 and request.enable2_pc
    keep_prepared_txn = ctx.api_version >= 6 and request.keep_prepared_txn
    ongoing = None
    try:
        if transactional_id is None and not (enable_2pc or keep_prepared_txn):
            producer_id = ctx.producer_ids.generate_producer_id()
            log.info("new idempotent producer id %d (client %s)", producer_id, ctx.client_id)
            return _response(ErrorCode.NONE, producer_id, 0)
        expected = None
        if ctx.api_version >= 3 and request.producer_id != NO_PRODUCER_ID:
            expected = ProducerIdAndEpoch(request.producer_id, request.producer_epoch)
        coordinator = ctx.transactions.coordinator
        if keep_prepared_txn and enable_2pc:
            result, ongoing = await coordinator.init_keeping_prepared_txn(transactional_id, expected)
        elif keep_prepared_txn:
            raise InvalidRequest("keepPreparedTxn is for two-phase commit producers (enable2Pc) only")
        else:
            result = await coordinator.init_producer_id(
                transactional_id, request.transaction_timeout_ms, expected, enable_2pc=enable_2pc
            )
    except KafkaError as exc:
        log.debug("InitProducerId(%r) failed: %s", transactional_id, exc)
        return _response(wire_code(exc, API_KEY, ctx.api_version))
    return _response(ErrorCode.NONE, result.producer_id, result.producer_epoch, ongoing)
