"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT topic configs while the topic is in
use (``kafka-configs --alter``, confluent-kafka's ``incremental_alter_configs``).

Each resource gets its own answer. Topics only: onceflow's broker configs are static (read-only in
DescribeConfigs), so a BROKER resource is refused with INVALID_REQUEST, as is any other type.
``validate_only`` checks everything and changes nothing. A topic needs ALTER_CONFIGS on it (else
TOPIC_AUTHORIZATION_FAILED), the broker ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED).

The broker works out the topic's new set of overrides from the image's current one and checks it;
the active controller then makes that set the topic's (an AlterConfigs of the whole set, forwarded),
and the answer goes once this broker's image has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kafka.protocol.admin import (
    AlterConfigsRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from onceflow.broker.config_changes import incremental_overrides
from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC
from onceflow.broker.security.access import ALTER_CONFIGS, CLUSTER, TOPIC, authorize
from onceflow.broker.topic_configs import TOPIC_CONFIG_TYPES, TYPE_LIST, topic_defaults
from onceflow.protocol.errors import ErrorCode, InvalidRequest, KafkaError, UnknownTopicOrPartition

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = IncrementalAlterConfigsRequest

_LIST_CONFIGS = frozenset(name for name, kind in TOPIC_CONFIG_TYPES.items() if kind == TYPE_LIST)


ALTER_CONFIGS_KEY = 33
ALTER_CONFIGS_VERSION = 2


async def _set_topic_configs(ctx: RequestContext, name: str, overrides: dict[str, str]) -> None:
    """Make ``overrides`` the topic's whole set, through the active controller."""
    resource = AlterConfigsRequest.AlterConfigsResource
    request = AlterConfigsRequest(
        resources=[
            resource(
                resource_type=RESOURCE_TOPIC,
                resource_name=name,
                configs=[resource.AlterableConfig(name=k, value=v) for k, v in overrides.items()],
            )
        ],
        validate_only=False,
    )
    answer = (await forward(ctx, request, ALTER_CONFIGS_KEY, ALTER_CONFIGS_VERSION)).responses[0]
    if answer.error_code:
        raise KafkaError(answer.error_message or "", answer.error_code)
    await wait_visible(ctx, lambda image: dict(image.topic_config(name)) == overrides)


async def alter_resource(
    ctx: RequestContext,
    resource_type: int,
    resource_name: str,
    new_overrides: Callable[[Mapping[str, str]], dict[str, str]],
    validate_only: bool,
) -> tuple[int, str | None]:
    """Apply ``new_overrides(current overrides)`` to one resource; its (error code, message)."""
    try:
        if resource_type == RESOURCE_TOPIC and not authorize(ctx, ALTER_CONFIGS, TOPIC, resource_name):
            raise KafkaError(
                f"not authorized to alter topic {resource_name!r}", ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
        if resource_type == RESOURCE_BROKER and not authorize(ctx, ALTER_CONFIGS, CLUSTER):
            raise KafkaError(
                "not authorized to alter the broker's configs", ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
        if resource_type == RESOURCE_BROKER:
            raise InvalidRequest("onceflow's broker configs are static; set them at `onceflow serve`")
        if resource_type != RESOURCE_TOPIC:
            raise InvalidRequest(f"resource type {resource_type} is not supported")
        topic = ctx.topics.get(resource_name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {resource_name!r} does not exist")
        new = new_overrides(topic.configs)
        ctx.topics.alter_topic_configs(resource_name, new, validate_only=True)
        if not validate_only:
            await _set_topic_configs(ctx, resource_name, new)
    except KafkaError as exc:
        return int(exc.code), str(exc)
    return int(ErrorCode.NONE), None


async def answer_resources(ctx: RequestContext, request, response_cls, new_overrides_for):
    """Both AlterConfigs APIs: ``new_overrides_for(resource)`` gives the function from a topic's
    current overrides to its new ones; every resource gets its own answer in ``response_cls``."""
    responses = []
    for resource in request.resources or []:
        code, message = await alter_resource(
            ctx,
            resource.resource_type,
            resource.resource_name,
            new_overrides_for(resource),
            bool(request.validate_only),
        )
        responses.append(
            response_cls.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return response_cls(throttle_time_ms=0, responses=responses)


async def handle(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    defaults = topic_defaults(ctx.config)

    def new_overrides_for(resource):
        operations = [(c.name, c.config_operation, c.value) for c in resource.configs or []]
        return lambda current: incremental_overrides(current, operations, defaults, _LIST_CONFIGS)

    return await answer_resources(ctx, request, IncrementalAlterConfigsResponse, new_overrides_for)
