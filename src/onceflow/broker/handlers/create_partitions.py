"""CreatePartitions (37): grow topics to a larger partition count (Kafka never shrinks a topic).

As in Kafka, one request may add at most 10,000 partitions in all; above that every topic of the
request is refused with POLICY_VIOLATION and nothing is created. Each topic needs ALTER, else
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import ALTER, TOPIC, allowed_names
from onceflow.broker.topics import MAX_PARTITIONS_PER_REQUEST
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


def _new_partitions(ctx: RequestContext, topic) -> int:
    current = ctx.topics.get(topic.name)
    return max(topic.count - len(current.partitions), 0) if current is not None else 0


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    total = sum(_new_partitions(ctx, topic) for topic in request.topics)
    if total > MAX_PARTITIONS_PER_REQUEST:
        message = (
            f"the request would add {total} partitions in all; one request may add at most "
            f"{MAX_PARTITIONS_PER_REQUEST}: grow the topics in several requests"
        )
        return CreatePartitionsResponse(
            throttle_time_ms=0,
            results=[
                _Result(name=topic.name, error_code=int(ErrorCode.POLICY_VIOLATION), error_message=message)
                for topic in request.topics
            ],
        )
    names = [t.name for t in request.topics]
    alterable = allowed_names(ctx, ALTER, TOPIC, names)
    results = []
    for topic in request.topics:
        if alterable is not None and topic.name not in alterable and names.count(topic.name) == 1:
            results.append(
                _Result(
                    name=topic.name,
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message="The topic authorization is failed.",
                )
            )
            continue
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
