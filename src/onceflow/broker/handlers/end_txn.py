"""EndTxn (26): commit or abort the producer's transaction. The answer goes out once the coordinator
has written PrepareCommit or PrepareAbort (the decision); the markers and the Complete state follow
right after it, as in Kafka (see ``txn.coordinator``).

v5 is transaction protocol v2 (KIP-890 part 2): every EndTxn bumps the epoch, and the response
carries the producer id and epoch for the next transaction, so a late EndTxn can never end a later
transaction (KAFKA-17754). Needs WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import TRANSACTIONAL_ID, WRITE, authorize
from onceflow.broker.txn.errors import wire_code
from onceflow.broker.txn.metadata import TV_0, TV_2
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.transaction_versions import FIRST_TV2_END_TXN_VERSION

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = EndTxnRequest


async def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    code = ErrorCode.NONE
    producer_id, producer_epoch = -1, -1
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        code = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
    version = TV_2 if ctx.api_version >= FIRST_TV2_END_TXN_VERSION else TV_0
    try:
        answer = await ctx.transactions.coordinator.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            bool(request.committed),
            version,
        )
    except KafkaError as exc:
        code = wire_code(exc, API_KEY, ctx.api_version)
    else:
        producer_id, producer_epoch = answer.producer_id, answer.producer_epoch
    return EndTxnResponse(
        throttle_time_ms=0, error_code=int(code), producer_id=producer_id, producer_epoch=producer_epoch
    )
