"""CreatePartitions (37): grow topics to a larger partition count (Kafka never shrinks a topic),
decided by the active controller (``broker.forwarding``), which places the new partitions.

As in Kafka, one request may add at most 10,000 partitions in all; above that every topic of the
request is refused with POLICY_VIOLATION and nothing is created. Each topic needs ALTER, else
TOPIC_AUTHORIZATION_FAILED (checked here; only the others go on). The answer goes once this
broker's image has the new partitions.
"""

from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.security.access import ALTER, TOPIC, allowed_names, merged_in_order, with_items
from onceflow.broker.topics import MAX_PARTITIONS_PER_REQUEST
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3
REQUEST = CreatePartitionsRequest

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def _new_partitions(ctx: RequestContext, topic) -> int:
    current = ctx.metadata.image.topic(topic.name)
    return max(topic.count - len(current.partitions), 0) if current is not None else 0


async def _until_visible(ctx: RequestContext, request, response) -> None:
    """Wait until this broker's image has the partitions the controller added."""
    grown = {
        t.name: t.count
        for t, result in zip(request.topics, response.results, strict=False)
        if result.error_code == 0 and not request.validate_only
    }
    if grown:

        def has_them(image) -> bool:
            return all(
                image.topic(name) is not None and len(image.topic(name).partitions) >= count
                for name, count in grown.items()
            )

        await wait_visible(ctx, has_them)


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
    refused = {
        i: _Result(
            name=name,
            error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            error_message="The topic authorization is failed.",
        )
        for i, name in enumerate(names)
        if alterable is not None and name not in alterable
    }
    if len(refused) == len(names):
        return CreatePartitionsResponse(throttle_time_ms=0, results=list(refused.values()))
    if refused:
        request = with_items(request, "topics", [t for i, t in enumerate(request.topics) if i not in refused])
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        response = CreatePartitionsResponse(
            throttle_time_ms=0,
            results=[
                _Result(name=t.name, error_code=int(error_code_for(exc)), error_message=str(exc))
                for t in request.topics
            ],
        )
    else:
        await _until_visible(ctx, request, response)
    if refused:
        response.results = merged_in_order(names, refused, response.results)
    return response
