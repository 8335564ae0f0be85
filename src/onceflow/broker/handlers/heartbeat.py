"""Heartbeat (12): keeps a member alive and tells it when to rejoin (REBALANCE_IN_PROGRESS). Needs
READ on the group, else GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from kafka.protocol.consumer.group import HeartbeatRequest, HeartbeatResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import GROUP, READ, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4
REQUEST = HeartbeatRequest


async def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not authorize(ctx, READ, GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        error = await ctx.groups.heartbeat(
            request.group_id,
            request.member_id,
            request.group_instance_id if ctx.api_version >= 3 else None,
            request.generation_id,
        )
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))
