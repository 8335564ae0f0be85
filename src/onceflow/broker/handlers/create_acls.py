"""CreateAcls (30): every creation fails with SECURITY_DISABLED, as on a Kafka broker without an
authorizer (see ``describe_acls``)."""

from __future__ import annotations

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.handlers.describe_acls import NO_AUTHORIZER
from onceflow.protocol.errors import ErrorCode

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = CreateAclsRequest

_Result = CreateAclsResponse.AclCreationResult


async def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    refused = int(ErrorCode.SECURITY_DISABLED)
    return CreateAclsResponse(
        throttle_time_ms=0,
        results=[_Result(error_code=refused, error_message=NO_AUTHORIZER) for _ in request.creations],
    )
