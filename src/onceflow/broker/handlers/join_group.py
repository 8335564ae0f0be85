"""JoinGroup (11): enter a group's rebalance; answered when the join phase completes.

v4+ requires a known member id (KIP-394), v5+ carries group.instance.id (KIP-345). Needs READ on the
group, else GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.group.handler_support import client_host
from onceflow.broker.group.requests import JoinRequest, JoinResult
from onceflow.broker.security.access import GROUP, READ, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9
REQUEST = JoinGroupRequest

_Member = JoinGroupResponse.JoinGroupResponseMember


def _response(result: JoinResult) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader_id,
        skip_assignment=False,
        member_id=result.member_id,
        members=[_Member(member_id=m, group_instance_id=i, metadata=meta) for m, i, meta in result.members],
    )


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    if not authorize(ctx, READ, GROUP, request.group_id):
        return _response(JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, request.member_id))
    v = ctx.api_version
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else -1,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata or b"")) for p in request.protocols or []],
        require_known_member_id=v >= 4,
    )
    result = await ctx.groups.join_group(join)
    return _response(result)
