"""Admin requests a broker sends on to the active controller (Kafka's ``ForwardingManager``).

A broker decides no cluster metadata itself: CreateTopics, CreatePartitions, DeleteTopics, the
config changes and ElectLeaders go to the active controller as they came (``ctx.controller``, the
node's ``ControllerChannel``), and the client gets the controller's answer once the change is
committed. The broker then waits, briefly, until its own image has the change too, so that a client
that asks this broker next (to produce to the new topic, say) finds it here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest

from onceflow.broker.context import RequestContext
from onceflow.metadata.image import MetadataImage
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# How long a forwarded change may take to reach this broker's image before the answer goes anyway.
VISIBLE_WAIT_S = 5.0
CREATE_TOPICS_VERSION = 7

_Topic = CreateTopicsRequest.CreatableTopic


async def forward(
    ctx: RequestContext, request: Any, api_key: int | None = None, version: int | None = None
) -> Any:
    """The active controller's answer to ``request``; raises KafkaError (NOT_CONTROLLER, retriable)
    when no controller answered in time."""
    return await ctx.controller.send(
        ctx.api_key if api_key is None else api_key, ctx.api_version if version is None else version, request
    )


async def wait_visible(ctx: RequestContext, predicate: Callable[[MetadataImage], bool]) -> bool:
    return await ctx.metadata.wait_until(predicate, VISIBLE_WAIT_S)


async def create_topics_now(
    ctx: RequestContext, specs: Iterable[tuple[str, int, int, Mapping[str, str]]]
) -> dict[str, tuple[ErrorCode, str | None]]:
    """Create topics (name, partitions, replication factor, configs; -1 for the defaults) through the
    controller, as the broker does for auto-creation and internal topics; each name's (error,
    message), once the created ones are in this broker's image."""
    specs = list(specs)
    request = CreateTopicsRequest(
        topics=[
            _Topic(
                name=name,
                num_partitions=partitions,
                replication_factor=factor,
                assignments=[],
                configs=[_Topic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
            for name, partitions, factor, configs in specs
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    try:
        response = await forward(ctx, request, 19, CREATE_TOPICS_VERSION)
    except KafkaError as exc:
        return {name: (exc.code, str(exc)) for name, *_ in specs}
    results = {t.name: (ErrorCode(t.error_code), t.error_message) for t in response.topics}
    created = [name for name, (code, _m) in results.items() if code is ErrorCode.NONE]
    if created:
        await wait_visible(ctx, lambda image: all(image.topic(n) is not None for n in created))
    return results
