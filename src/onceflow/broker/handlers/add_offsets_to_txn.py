"""AddOffsetsToTxn (25): the group's ``__consumer_offsets`` partition joins the transaction, so that
TxnOffsetCommit can write there and the commit marker makes those offsets visible. Needs WRITE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the group (else
GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from kafka.protocol.producer import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import GROUP, READ, TRANSACTIONAL_ID, WRITE, authorize
from onceflow.broker.txn.errors import wire_code
from onceflow.protocol.errors import ErrorCode, KafkaError

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4
REQUEST = AddOffsetsToTxnRequest


async def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    code = ErrorCode.NONE
    if not authorize(ctx, WRITE, TRANSACTIONAL_ID, request.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, READ, GROUP, request.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        try:
            await ctx.transactions.coordinator.add_offsets_to_txn(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
            )
        except KafkaError as exc:
            code = wire_code(exc, API_KEY, ctx.api_version)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=int(code))
