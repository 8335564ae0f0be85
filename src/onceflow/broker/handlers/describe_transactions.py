"""DescribeTransactions (65, KIP-664): state, producer, timeout and partitions of transactional ids.
Each id needs DESCRIBE (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); topics the principal may not
DESCRIBE are left out of a transaction's partitions (Kafka's)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DESCRIBE, TOPIC, TRANSACTIONAL_ID, allowed_names
from onceflow.protocol.errors import ErrorCode

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = DescribeTransactionsRequest

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


async def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    requested = list(request.transactional_ids or [])
    describable = allowed_names(ctx, DESCRIBE, TRANSACTIONAL_ID, requested)
    ids = [tid for tid in requested if describable is None or tid in describable]
    refused = [
        _State(
            error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), transactional_id=tid, topics=[]
        )
        for tid in requested
        if tid not in ids
    ]
    states = []
    for d in await ctx.transactions.describe_transactions(ids):
        visible = allowed_names(ctx, DESCRIBE, TOPIC, (d.topics or {}).keys(), log_denied=False)
        states.append(
            _State(
                error_code=int(d.error_code),
                transactional_id=d.transactional_id,
                transaction_state=d.state,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[
                    _Topic(topic=t, partitions=ps)
                    for t, ps in (d.topics or {}).items()
                    if visible is None or t in visible
                ],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states + refused)
