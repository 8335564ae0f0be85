"""ListGroups (16): every live group, filtered by state (v4+) and type (v5+; ours are "classic"). With
DESCRIBE on the cluster every group is listed, else only those the principal may DESCRIBE (Kafka's)."""

from __future__ import annotations

from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, GROUP, allowed_names, authorize
from onceflow.protocol.errors import KafkaError, error_code_for

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5
REQUEST = ListGroupsRequest

_Group = ListGroupsResponse.ListedGroup


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    try:
        listed = await ctx.groups.list_groups(
            states=(request.states_filter or []) if v >= 4 else [],
            types=(request.types_filter or []) if v >= 5 else [],
        )
    except KafkaError as exc:
        return ListGroupsResponse(throttle_time_ms=0, error_code=int(error_code_for(exc)), groups=[])
    if not authorize(ctx, DESCRIBE, CLUSTER, log_denied=False):
        visible = allowed_names(ctx, DESCRIBE, GROUP, (g.group_id for g in listed), log_denied=False)
        listed = [g for g in listed if visible is None or g.group_id in visible]
    groups = [
        _Group(
            group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type
        )
        for g in listed
    ]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)
