"""FindCoordinator (10): this broker coordinates every group and every transactional id.

v0-3 ask for one key; v4+ batch them (``coordinator_keys``, KIP-699). Key type 0 is a group,
1 a transactional id; anything else is INVALID_REQUEST. A group key needs DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DESCRIBE, GROUP, TRANSACTIONAL_ID, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6
REQUEST = FindCoordinatorRequest

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

_Coordinator = FindCoordinatorResponse.Coordinator


def _answer(ctx: RequestContext, key_type: int, key: str | None) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP_KEY_TYPE and not authorize(ctx, DESCRIBE, GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if key_type == TRANSACTION_KEY_TYPE and not authorize(ctx, DESCRIBE, TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    return ErrorCode.NONE, None


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    node = ctx.config.node_id
    host, port = ctx.endpoint
    key_type = request.key_type if ctx.api_version >= 1 else GROUP_KEY_TYPE
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys or []:
            error, message = _answer(ctx, key_type, key)
            ok = error is ErrorCode.NONE
            coordinators.append(
                _Coordinator(
                    key=key,
                    node_id=node if ok else -1,
                    host=host if ok else "",
                    port=port if ok else -1,
                    error_code=int(error),
                    error_message=message,
                )
            )
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    error, message = _answer(ctx, key_type, request.key)
    ok = error is ErrorCode.NONE
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=int(error),
        error_message=message,
        node_id=node if ok else -1,
        host=host if ok else "",
        port=port if ok else -1,
    )
