"""DeleteAcls (31): every filter fails with SECURITY_DISABLED and matches nothing, as on a Kafka
broker without an authorizer (see ``describe_acls``)."""

from __future__ import annotations

from kafka.protocol.admin import DeleteAclsRequest, DeleteAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.handlers.describe_acls import NO_AUTHORIZER
from onceflow.protocol.errors import ErrorCode

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = DeleteAclsRequest

_Result = DeleteAclsResponse.DeleteAclsFilterResult


async def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    refused = int(ErrorCode.SECURITY_DISABLED)
    return DeleteAclsResponse(
        throttle_time_ms=0,
        filter_results=[
            _Result(error_code=refused, error_message=NO_AUTHORIZER, matching_acls=[])
            for _ in request.filters
        ],
    )
