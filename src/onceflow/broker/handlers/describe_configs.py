"""DescribeConfigs (32): topic configs (defaults and overrides, marked by source) and broker configs.
A topic needs DESCRIBE_CONFIGS on it (else TOPIC_AUTHORIZATION_FAILED), the broker DESCRIBE_CONFIGS on
the cluster (else CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE_CONFIGS, TOPIC, authorize
from onceflow.broker.topic_configs import DescribedConfig, describe_broker_configs, describe_topic_configs
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidRequest,
    KafkaError,
    UnknownTopicOrPartition,
    error_code_for,
)

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4
REQUEST = DescribeConfigsRequest

# Kafka's ConfigResource.Type.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym


def _configs_of(ctx: RequestContext, resource) -> list[DescribedConfig]:
    if resource.resource_type == RESOURCE_TOPIC and not authorize(
        ctx, DESCRIBE_CONFIGS, TOPIC, resource.resource_name
    ):
        raise KafkaError(
            f"not authorized to describe the configs of topic {resource.resource_name!r}",
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        )
    if resource.resource_type == RESOURCE_BROKER and not authorize(ctx, DESCRIBE_CONFIGS, CLUSTER):
        raise KafkaError(
            "not authorized to describe the broker's configs", ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
    if resource.resource_type == RESOURCE_TOPIC:
        topic = ctx.topics.get(resource.resource_name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {resource.resource_name!r} does not exist")
        return describe_topic_configs(topic.configs, ctx.config)
    if resource.resource_type == RESOURCE_BROKER:
        if resource.resource_name not in ("", str(ctx.config.node_id)):
            raise InvalidRequest(
                f"unexpected broker id {resource.resource_name!r}; this broker is {ctx.config.node_id}"
            )
        return describe_broker_configs(ctx.config, ctx.services.advertised_port)
    raise InvalidRequest(f"resource type {resource.resource_type} is not supported")


def _entry(config: DescribedConfig, include_synonyms: bool) -> _Entry:
    synonyms = (
        [
            _Synonym(name=syn[2] if len(syn) > 2 else config.name, value=syn[1], source=syn[0])
            for syn in config.synonyms
        ]
        if include_synonyms
        else []
    )
    return _Entry(
        name=config.name,
        value=config.value,
        read_only=config.read_only,
        config_source=config.source,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=config.config_type,
        documentation=None,
    )


async def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            configs = _configs_of(ctx, resource)
        except KafkaError as exc:
            code = error_code_for(exc)
            results.append(
                _Result(
                    error_code=int(code),
                    error_message=str(exc),
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[],
                )
            )
            continue
        wanted = resource.configuration_keys
        if wanted is not None:
            configs = [c for c in configs if c.name in wanted]
        results.append(
            _Result(
                error_code=int(ErrorCode.NONE),
                error_message=None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[_entry(c, request.include_synonyms) for c in configs],
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
