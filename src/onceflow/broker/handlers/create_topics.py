"""CreateTopics (19): new topics with a partition count and config overrides, or a dry run.

One broker: the replication factor must be -1 (the default) or 1, and manual assignments may only
name this broker.

Kafka's controller writes one metadata record per topic, partition and config override, and refuses
a request that would take more than ``MAX_RECORDS_PER_USER_OP`` (10,000) of them: every topic of it
gets POLICY_VIOLATION and none is created. So does this broker (CreatePartitions too), which would
otherwise spend minutes creating a partition count near 2^31 on its only event loop and fill the disk.
"""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.topic_configs import describe_topic_configs
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

MAX_RECORDS_PER_USER_OP = 10_000
TOO_LARGE_MESSAGE = "Unable to perform excessively large batch operation."

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


def _create(ctx: RequestContext, topic, validate_only: bool) -> _Result:
    configs = {c.name: c.value for c in topic.configs}
    count = _partition_count(ctx, topic)
    created = ctx.topics.create_topic(topic.name, count, configs, validate_only=validate_only)
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
            for c in describe_topic_configs(created.configs)
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


def _create_all(ctx: RequestContext, request: CreateTopicsRequest, validate_only: bool) -> list[_Result]:
    names = [t.name for t in request.topics]
    results = []
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(
                _failed(topic.name, ErrorCode.INVALID_REQUEST, "the request names this topic more than once")
            )
            continue
        try:
            results.append(_create(ctx, topic, validate_only))
        except KafkaError as exc:
            results.append(_failed(topic.name, error_code_for(exc), str(exc)))
    return results


def _metadata_records(request: CreateTopicsRequest, checked: list[_Result]) -> int:
    """The records Kafka's controller would write for the topics that pass: a topic record, one per
    partition and one per config override."""
    return sum(
        1 + result.num_partitions + len(topic.configs)
        for topic, result in zip(request.topics, checked, strict=True)
        if result.error_code == 0
    )


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    checked = _create_all(ctx, request, validate_only=True)
    if _metadata_records(request, checked) > MAX_RECORDS_PER_USER_OP:
        results = [_failed(t.name, ErrorCode.POLICY_VIOLATION, TOO_LARGE_MESSAGE) for t in request.topics]
    elif request.validate_only:
        results = checked
    else:
        results = _create_all(ctx, request, validate_only=False)
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
