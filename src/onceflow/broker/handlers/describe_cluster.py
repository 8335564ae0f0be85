"""DescribeCluster (60): the cluster id, the controller (us) and the brokers (us)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = DescribeClusterRequest

ENDPOINT_BROKERS = 1


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    services = ctx.services
    if ctx.api_version >= 1 and request.endpoint_type != ENDPOINT_BROKERS:
        # A broker only answers for broker endpoints; controller endpoints come from a controller.
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.MISMATCHED_ENDPOINT_TYPE),
            error_message="this endpoint is a broker; it describes broker endpoints only",
            endpoint_type=request.endpoint_type,
            cluster_id=services.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    broker = DescribeClusterResponse.DescribeClusterBroker(
        broker_id=ctx.config.node_id,
        host=services.advertised_host,
        port=services.advertised_port,
        rack=None,
        is_fenced=False,
    )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=services.cluster_id,
        controller_id=ctx.config.node_id,
        brokers=[broker],
    )
