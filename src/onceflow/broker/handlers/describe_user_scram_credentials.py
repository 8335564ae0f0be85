"""DescribeUserScramCredentials (50, KIP-554): which SCRAM mechanisms (and iterations) each user has,
never the credentials themselves (``kafka-configs --describe --entity-type users``, ``onceflow users
scram list``). Needs DESCRIBE on the cluster. No users (null or empty): every user with a credential;
a user without one is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE (Kafka's ScramImage)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = DescribeUserScramCredentialsRequest

_Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Result.CredentialInfo


async def handle(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not authorize(ctx, DESCRIBE, CLUSTER):
        return DescribeUserScramCredentialsResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            error_message=None,
            results=[],
        )
    users = [u.name for u in request.users] if request.users else None
    described = ctx.services.scram.describe(users) if ctx.services.scram is not None else []
    return DescribeUserScramCredentialsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        results=[
            _Result(
                user=name,
                error_code=int(code),
                error_message=message,
                credential_infos=[_Info(mechanism=m, iterations=i) for m, i in infos],
            )
            for name, code, message, infos in described
        ],
    )
