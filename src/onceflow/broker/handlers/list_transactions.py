"""ListTransactions (66, KIP-664): transactional ids by state, producer id and (v1+) minimum running
duration. The v2 ``transactional_id_pattern`` filter (KIP-1152: an RE2 regular expression matching whole
ids, as Kafka's RE2/J one; an invalid one is INVALID_REGULAR_EXPRESSION) is applied here. Only ids the
principal may DESCRIBE are listed."""

from __future__ import annotations

from kafka.protocol.admin import ListTransactionsRequest, ListTransactionsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.patterns import compile_pattern
from onceflow.broker.security.access import DESCRIBE, TRANSACTIONAL_ID, allowed_names
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = ListTransactionsRequest

_State = ListTransactionsResponse.TransactionState


def _response(code: ErrorCode, unknown=(), states=()) -> ListTransactionsResponse:
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=int(code),
        unknown_state_filters=list(unknown),
        transaction_states=list(states),
    )


async def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    pattern = request.transactional_id_pattern if ctx.api_version >= 2 else None
    try:
        matcher = compile_pattern(pattern, "TransactionalIdPattern") if pattern else None
    except KafkaError as exc:
        return _response(error_code_for(exc))
    try:
        result = await ctx.transactions.list_transactions(
            request.state_filters or [], request.producer_id_filters or [], duration
        )
    except KafkaError as exc:
        return _response(error_code_for(exc))
    visible = allowed_names(
        ctx, DESCRIBE, TRANSACTIONAL_ID, (t.transactional_id for t in result.transactions), log_denied=False
    )
    states = [
        _State(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
        for t in result.transactions
        if (matcher is None or matcher.fullmatch(t.transactional_id))
        and (visible is None or t.transactional_id in visible)
    ]
    return _response(ErrorCode.NONE, result.unknown_state_filters, states)
