"""DescribeTransactions (65, KIP-664): state, producer, timeout and partitions of transactional ids."""

from __future__ import annotations

from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

from onceflow.broker.context import RequestContext

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = DescribeTransactionsRequest

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


async def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    ids = list(request.transactional_ids or [])
    states = []
    for d in await ctx.transactions.describe_transactions(ids):
        states.append(
            _State(
                error_code=int(d.error_code),
                transactional_id=d.transactional_id,
                transaction_state=d.state,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[_Topic(topic=t, partitions=ps) for t, ps in (d.topics or {}).items()],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
