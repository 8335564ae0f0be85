"""LeaveGroup (13): one member (v0-2) or a batch of members by id / group.instance.id (v3+). Needs READ
on the group, else GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from kafka.protocol.consumer.group import LeaveGroupRequest, LeaveGroupResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import GROUP, READ, authorize
from onceflow.protocol.errors import ErrorCode

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = LeaveGroupRequest

_Member = LeaveGroupResponse.MemberResponse


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    batch = ctx.api_version >= 3
    if batch:
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members or []]
    else:
        leaving = [(request.member_id or "", None)]
    if not authorize(ctx, READ, GROUP, request.group_id):
        top, errors = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        top, errors = await ctx.groups.leave_group(request.group_id, leaving)
    if not batch:
        # Old versions have one error: the member's own when the group was found.
        if top is ErrorCode.NONE and errors:
            top = errors[0]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=int(top))
    members = [
        _Member(member_id=mid, group_instance_id=iid, error_code=int(err))
        for (mid, iid), err in zip(leaving, errors, strict=False)
    ]
    return LeaveGroupResponse(
        throttle_time_ms=0, error_code=int(top), members=members if top is ErrorCode.NONE else []
    )
