"""DescribeAcls (29): onceflow has no authorizer, so, as a Kafka broker configured without one, it
answers SECURITY_DISABLED whatever the filter. Clients and tools (librdkafka's ``describe_acls``, UIs)
then report that security is disabled, rather than, with the API left out of ApiVersions, a broker too
old to have ACLs. CreateAcls and DeleteAcls answer the same way."""

from __future__ import annotations

from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = DescribeAclsRequest

NO_AUTHORIZER = "No Authorizer is configured on the broker"


async def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    return DescribeAclsResponse(
        throttle_time_ms=0,
        error_code=int(ErrorCode.SECURITY_DISABLED),
        error_message=NO_AUTHORIZER,
        resources=[],
    )
