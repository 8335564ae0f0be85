"""AlterConfigs (33), the older, non-incremental form (kafka-python's ``alter_configs``): the request's
configs become the topic's whole set of overrides, and those it leaves out go back to their defaults.
Same resource rules as IncrementalAlterConfigs (topics only)."""

from __future__ import annotations

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from onceflow.broker.config_changes import replaced_overrides
from onceflow.broker.context import RequestContext
from onceflow.broker.handlers.incremental_alter_configs import answer_resources

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = AlterConfigsRequest


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    def new_overrides_for(resource):
        entries = [(c.name, c.value) for c in resource.configs or []]
        return lambda _current: replaced_overrides(entries)

    return await answer_resources(ctx, request, AlterConfigsResponse, new_overrides_for)
