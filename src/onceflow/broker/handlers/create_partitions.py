"""CreatePartitions (37): grow topics to a larger partition count (Kafka never shrinks a topic). As in
Kafka, a request adding more than 10,000 partitions in all is refused whole with POLICY_VIOLATION
(see :mod:`onceflow.broker.handlers.create_topics`)."""

from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.handlers.create_topics import MAX_RECORDS_PER_USER_OP, TOO_LARGE_MESSAGE
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3
REQUEST = CreatePartitionsRequest

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def _grow(ctx: RequestContext, topic, validate_only: bool) -> None:
    if topic.assignments is not None:
        current = ctx.topics.get(topic.name)
        new_partitions = topic.count - (len(current.partitions) if current else 0)
        if len(topic.assignments) != new_partitions:
            raise KafkaError(
                f"{len(topic.assignments)} assignments were given for {new_partitions} new partitions",
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            )
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [ctx.config.node_id]:
                raise KafkaError(
                    f"assignment to brokers {list(assignment.broker_ids)}; the only broker is {ctx.config.node_id}",
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                )
    ctx.topics.create_partitions(topic.name, topic.count, validate_only=validate_only)


def _new_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> int:
    total = 0
    for topic in request.topics:
        current = ctx.topics.get(topic.name)
        if current is not None and topic.count > len(current.partitions):
            total += topic.count - len(current.partitions)
    return total


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    if _new_partitions(ctx, request) > MAX_RECORDS_PER_USER_OP:
        results = [
            _Result(name=t.name, error_code=int(ErrorCode.POLICY_VIOLATION), error_message=TOO_LARGE_MESSAGE)
            for t in request.topics
        ]
        return CreatePartitionsResponse(throttle_time_ms=0, results=results)
    names = [t.name for t in request.topics]
    results = []
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(
                _Result(
                    name=topic.name,
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message="duplicate topic in request",
                )
            )
            continue
        try:
            _grow(ctx, topic, request.validate_only)
        except KafkaError as exc:
            results.append(
                _Result(name=topic.name, error_code=int(error_code_for(exc)), error_message=str(exc))
            )
        else:
            results.append(_Result(name=topic.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
