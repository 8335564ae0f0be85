"""CreateTopics (19): new topics with a partition count and config overrides, or a dry run.

One broker: the replication factor must be -1 (the default) or 1, and manual assignments may only
name this broker. As in Kafka, a request that would make more than 10,000 partitions in all is refused
as a whole (POLICY_VIOLATION for each of its topics) before anything is checked or created.

Authorization (Kafka's): CREATE on the cluster, else CREATE on each topic (TOPIC_AUTHORIZATION_FAILED
for the others); a created topic's configs are in the answer only with DESCRIBE_CONFIGS on it (else
its config error is TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, CREATE, DESCRIBE_CONFIGS, TOPIC, allowed_names, authorize
from onceflow.broker.topic_configs import describe_topic_configs
from onceflow.broker.topics import MAX_PARTITIONS_PER_REQUEST
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    KafkaError,
    error_code_for,
)

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7
REQUEST = CreateTopicsRequest

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs


def _partition_count(ctx: RequestContext, topic) -> int:
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequest("both manual assignments and numPartitions/replicationFactor were given")
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [ctx.config.node_id]:
                raise KafkaError(
                    f"partition {assignment.partition_index} is assigned to brokers {list(assignment.broker_ids)}; "
                    f"the only broker is {ctx.config.node_id}",
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                )
        return len(topic.assignments)
    if topic.replication_factor not in (-1, 1):
        raise InvalidReplicationFactor(
            f"Unable to replicate the partition {topic.replication_factor} time(s): the target replication "
            "factor cannot be reached because only 1 broker is registered."
        )
    if topic.num_partitions == -1:
        return ctx.config.num_partitions
    if topic.num_partitions < 1:
        raise InvalidPartitions(
            f"Number of partitions was set to an invalid non-positive value {topic.num_partitions}."
        )
    return topic.num_partitions


def _requested_partitions(ctx: RequestContext, topic) -> int:
    """Partitions a topic of the request asks for, as Kafka counts them against the limit: its
    assignments, else its count (-1: num.partitions); a count below 1 makes none."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return ctx.config.num_partitions
    return max(topic.num_partitions, 0)


def _create(ctx: RequestContext, topic, validate_only: bool, show_configs: bool = True) -> _Result:
    configs = {c.name: c.value for c in topic.configs}
    count = _partition_count(ctx, topic)
    created = ctx.topics.create_topic(topic.name, count, configs, validate_only=validate_only)
    if not show_configs:
        return _Result(
            name=topic.name,
            topic_id=created.topic_id if not validate_only else None,
            error_code=0,
            error_message=None,
            topic_config_error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            num_partitions=-1,
            replication_factor=-1,
            configs=[],
        )
    return _Result(
        name=topic.name,
        topic_id=created.topic_id if not validate_only else None,
        error_code=0,
        error_message=None,
        topic_config_error_code=0,
        num_partitions=count,
        replication_factor=1,
        configs=[
            _Config(
                name=c.name, value=c.value, read_only=c.read_only, config_source=c.source, is_sensitive=False
            )
            for c in describe_topic_configs(created.configs, ctx.config)
        ],
    )


def _failed(name: str, code: ErrorCode, message: str | None) -> _Result:
    return _Result(
        name=name,
        topic_id=None,
        error_code=int(code),
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    total = sum(_requested_partitions(ctx, topic) for topic in request.topics)
    if total > MAX_PARTITIONS_PER_REQUEST:
        message = (
            f"the request asks for {total} partitions in all; one request may create at most "
            f"{MAX_PARTITIONS_PER_REQUEST}: create the topics in several requests"
        )
        return CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[_failed(topic.name, ErrorCode.POLICY_VIOLATION, message) for topic in request.topics],
        )
    names = [t.name for t in request.topics]
    creatable = (
        None
        if authorize(ctx, CREATE, CLUSTER, log_denied=False)
        else allowed_names(ctx, CREATE, TOPIC, names)
    )
    describable = allowed_names(ctx, DESCRIBE_CONFIGS, TOPIC, names, log_denied=False)
    results = []
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(
                _failed(topic.name, ErrorCode.INVALID_REQUEST, "the request names this topic more than once")
            )
            continue
        if creatable is not None and topic.name not in creatable:
            results.append(_failed(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        try:
            show = describable is None or topic.name in describable
            results.append(_create(ctx, topic, request.validate_only, show))
        except KafkaError as exc:
            results.append(_failed(topic.name, error_code_for(exc), str(exc)))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
