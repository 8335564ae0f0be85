"""SyncGroup (14): the leader hands in the assignment; every member gets its share. Needs READ on the
group, else GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from kafka.protocol.consumer.group import SyncGroupRequest, SyncGroupResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.group.requests import SyncResult
from onceflow.broker.security.access import GROUP, READ, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = SyncGroupRequest


def _response(result: SyncResult) -> SyncGroupResponse:
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=int(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    if not authorize(ctx, READ, GROUP, request.group_id):
        return _response(SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    v = ctx.api_version
    assignments = {a.member_id: bytes(a.assignment or b"") for a in request.assignments or []}
    result = await ctx.groups.sync_group(
        request.group_id,
        request.member_id,
        request.group_instance_id if v >= 3 else None,
        request.generation_id,
        assignments,
        protocol_type=request.protocol_type if v >= 5 else None,
        protocol_name=request.protocol_name if v >= 5 else None,
    )
    return _response(result)
