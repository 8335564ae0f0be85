"""DescribeAcls (29): the ACLs a filter matches, grouped by resource pattern (``kafka-acls --list``,
``onceflow acls list``). Needs DESCRIBE on the cluster. Without an authorizer the broker answers
SECURITY_DISABLED whatever the filter, as Kafka's does; clients and tools then report that security is
disabled. A filter with an unknown type, pattern, operation or permission is INVALID_REQUEST."""

from __future__ import annotations

from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, authorize
from onceflow.broker.security.acls import AclBindingFilter, PatternType
from onceflow.protocol.errors import ErrorCode

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3
REQUEST = DescribeAclsRequest

NO_AUTHORIZER = "No Authorizer is configured on the broker"

_Resource = DescribeAclsResponse.DescribeAclsResource
_Acl = _Resource.AclDescription


def _refused(code: ErrorCode, message: str | None) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=int(code), error_message=message, resources=[])


async def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if not authorize(ctx, DESCRIBE, CLUSTER):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _refused(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    acl_filter = AclBindingFilter.from_wire(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter if ctx.api_version >= 1 else PatternType.LITERAL,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if acl_filter.unknown:
        return _refused(ErrorCode.INVALID_REQUEST, "DescribeAclsRequest contains UNKNOWN elements")
    grouped: dict[tuple, list] = {}
    for acl in authorizer.acls(acl_filter):
        grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
            _Acl(
                principal=acl.principal,
                host=acl.host,
                operation=int(acl.operation),
                permission_type=int(acl.permission),
            )
        )
    return DescribeAclsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        resources=[
            _Resource(resource_type=int(rtype), resource_name=name, pattern_type=int(ptype), acls=acls)
            for (rtype, name, ptype), acls in grouped.items()
        ],
    )
