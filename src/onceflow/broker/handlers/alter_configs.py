"""AlterConfigs (33), the older, non-incremental form (kafka-python's ``alter_configs``): the request's
configs become the topic's whole set of overrides, and those it leaves out go back to their defaults.
Same resource rules as IncrementalAlterConfigs (topics only)."""

from __future__ import annotations

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from onceflow.broker.config_changes import replaced_overrides
from onceflow.broker.context import RequestContext
from onceflow.broker.handlers.incremental_alter_configs import alter_resource

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = AlterConfigsRequest


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources or []:
        entries = [(c.name, c.value) for c in resource.configs or []]
        code, message = alter_resource(
            ctx,
            resource.resource_type,
            resource.resource_name,
            lambda _current, entries=entries: replaced_overrides(entries),
            bool(request.validate_only),
        )
        responses.append(
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)
