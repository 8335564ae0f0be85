"""DescribeGroups (15): state, protocol and members (with metadata and assignment when Stable). Each
group needs DESCRIBE, else GROUP_AUTHORIZATION_FAILED; its authorized operations are the authorizer's."""

from __future__ import annotations

from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse

from onceflow.broker import authorized_operations
from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DESCRIBE, GROUP, authorize, operations
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = DescribeGroupsRequest

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember
_NOT_REQUESTED = None  # kafka-python encodes None as the -2^31 marker


async def _describe(ctx: RequestContext, group_id: str, with_operations: bool) -> _Group:
    if not authorize(ctx, DESCRIBE, GROUP, group_id):
        return _Group(
            error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
            group_id=group_id,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=_NOT_REQUESTED,
        )
    try:
        d = await ctx.groups.describe_group(group_id)
    except KafkaError as exc:
        return _Group(
            error_code=int(error_code_for(exc)),
            group_id=group_id,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=_NOT_REQUESTED,
        )
    # Before v6 an unknown group is described as Dead without an error, as Kafka does.
    error = ErrorCode.NONE if d.error is ErrorCode.GROUP_ID_NOT_FOUND else d.error
    return _Group(
        error_code=int(error),
        group_id=group_id,
        group_state=d.state,
        protocol_type=d.protocol_type,
        protocol_data=d.protocol,
        members=[
            _Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in d.members
        ],
        # Only a group described without an error gets its operations (v3+), as in Kafka.
        authorized_operations=authorized_operations.reported(
            operations(ctx, GROUP, group_id) if with_operations else frozenset(), with_operations
        ),
    )


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    with_operations = ctx.api_version >= 3 and bool(request.include_authorized_operations)
    return DescribeGroupsResponse(
        throttle_time_ms=0, groups=[await _describe(ctx, g, with_operations) for g in request.groups or []]
    )
