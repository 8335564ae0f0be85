"""DeleteGroups (42): remove empty groups with their offsets (tombstones in ``__consumer_offsets``).
Each group needs DELETE, else GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from kafka.protocol.admin.groups import DeleteGroupsRequest, DeleteGroupsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DELETE, GROUP, allowed_names
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = DeleteGroupsRequest

_Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    names = list(request.groups_names or [])
    deletable = allowed_names(ctx, DELETE, GROUP, names)
    denied = {
        n: ErrorCode.GROUP_AUTHORIZATION_FAILED for n in names if deletable is not None and n not in deletable
    }
    allowed = [n for n in names if n not in denied]
    results = {}
    if allowed:
        try:
            results = await ctx.groups.delete_groups(allowed)
        except KafkaError as exc:
            results = dict.fromkeys(allowed, error_code_for(exc))
    results = {**results, **denied}
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[_Result(group_id=name, error_code=int(results[name])) for name in names],
    )
