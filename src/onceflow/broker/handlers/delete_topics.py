"""DeleteTopics (20): remove topics (by name; by name or id from v6), decided by the active
controller (``broker.forwarding``). Every broker deletes its logs of the topic when it replays the
removal (``broker.cluster_metadata``), and the group coordinator then drops every group's committed
offsets of its partitions. The answer goes once this broker no longer has the topic.

Each topic needs DELETE, else TOPIC_AUTHORIZATION_FAILED; a topic named by id without DESCRIBE on it
is answered without its name. Both are checked here; only the other topics go on.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.security.access import DELETE, DESCRIBE, TOPIC, authorize, merged_in_order, with_items
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6
REQUEST = DeleteTopicsRequest

_Result = DeleteTopicsResponse.DeletableTopicResult


def _refusal(ctx: RequestContext, name: str | None, topic_id) -> _Result | None:
    """Kafka's checks of one topic; None: it goes on to the controller."""
    if name is None and topic_id is not None:
        topic = ctx.metadata.image.topic_by_id(topic_id)
        if topic is None:
            return None  # the controller answers UNKNOWN_TOPIC_ID
        name = topic.name
        if not authorize(ctx, DESCRIBE, TOPIC, name):
            return _Result(
                name=None,
                topic_id=topic_id,
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                error_message=None,
            )
    if not authorize(ctx, DELETE, TOPIC, name):
        return _Result(
            name=name,
            topic_id=topic_id,
            error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            error_message=None,
        )
    return None


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        field, items = "topics", list(request.topics or [])
        wanted = [(t.name, t.topic_id) for t in items]
    else:
        field, items = "topic_names", list(request.topic_names or [])
        wanted = [(name, None) for name in items]
    refused = {}
    if ctx.services.authorizer is not None:
        for i, (name, topic_id) in enumerate(wanted):
            refusal = _refusal(ctx, name, topic_id)
            if refusal is not None:
                refused[i] = refusal
    if refused and len(refused) == len(wanted):
        return DeleteTopicsResponse(throttle_time_ms=0, responses=list(refused.values()))
    if refused:
        request = with_items(request, field, [item for i, item in enumerate(items) if i not in refused])
        wanted = [w for i, w in enumerate(wanted) if i not in refused]
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        response = DeleteTopicsResponse(
            throttle_time_ms=0,
            responses=[
                _Result(
                    name=name, topic_id=topic_id, error_code=int(error_code_for(exc)), error_message=str(exc)
                )
                for name, topic_id in wanted
            ],
        )
    else:
        gone = [r.topic_id for r in response.responses if r.error_code == 0 and r.topic_id is not None]
        if gone:
            await wait_visible(
                ctx, lambda image: all(image.topic_by_id(topic_id) is None for topic_id in gone)
            )
    if refused:
        response.responses = merged_in_order(items, refused, response.responses)
    return response
