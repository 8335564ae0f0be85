"""DescribeCluster (60): the cluster id, the controller and the brokers, from the metadata image:
each registered broker's endpoint on the listener the request came in on (fenced ones only from v2
when asked, with ``is_fenced``). Anyone may ask; the cluster's authorized operations need DESCRIBE on
it (else 0)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from onceflow.broker import authorized_operations
from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, authorize, operations
from onceflow.protocol.errors import ErrorCode

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = DescribeClusterRequest

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2


def _refused(ctx: RequestContext, request: DescribeClusterRequest, code: ErrorCode, message: str):
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=int(code),
        error_message=message,
        endpoint_type=request.endpoint_type,
        cluster_id=ctx.services.cluster_id,
        controller_id=-1,
        brokers=[],
    )


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    services = ctx.services
    if ctx.api_version >= 1 and request.endpoint_type not in (ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS):
        return _refused(
            ctx,
            request,
            ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            f"unsupported endpoint type {request.endpoint_type}",
        )
    if ctx.api_version >= 1 and request.endpoint_type != ENDPOINT_BROKERS:
        # A broker only answers for broker endpoints; controller endpoints come from a controller.
        return _refused(
            ctx,
            request,
            ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "this endpoint is a broker; it describes broker endpoints only",
        )
    asked = bool(request.include_cluster_authorized_operations)
    include_fenced = ctx.api_version >= 2 and bool(getattr(request, "include_fenced_brokers", False))
    brokers = []
    for broker_id in sorted(ctx.metadata.image.brokers):
        registration = ctx.metadata.image.brokers[broker_id]
        endpoint = registration.endpoint(ctx.listener)
        if endpoint is None or (registration.fenced and not include_fenced):
            continue
        brokers.append(
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=registration.rack,
                is_fenced=registration.fenced,
            )
        )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=services.cluster_id,
        controller_id=ctx.metadata.controller_id(),
        brokers=brokers,
        authorized_operations=authorized_operations.reported(
            operations(ctx, CLUSTER) if asked and authorize(ctx, DESCRIBE, CLUSTER) else frozenset(), asked
        ),
    )
