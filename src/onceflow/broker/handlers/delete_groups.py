"""DeleteGroups (42): remove empty groups with their offsets (tombstones in ``__consumer_offsets``)."""

from __future__ import annotations

from kafka.protocol.admin.groups import DeleteGroupsRequest, DeleteGroupsResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import KafkaError, error_code_for

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = DeleteGroupsRequest

_Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    names = list(request.groups_names or [])
    try:
        results = await ctx.groups.delete_groups(names)
    except KafkaError as exc:
        results = dict.fromkeys(names, error_code_for(exc))
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[_Result(group_id=name, error_code=int(results[name])) for name in names],
    )
