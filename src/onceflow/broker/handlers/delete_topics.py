"""DeleteTopics (20): remove topics (by name; by name or id from v6), decided by the active
controller (``broker.forwarding``). Every broker deletes its logs of the topic when it replays the
removal (``broker.cluster_metadata``), and the group coordinator then drops every group's committed
offsets of its partitions. The answer goes once this broker no longer has the topic.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.protocol.errors import KafkaError, error_code_for

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6
REQUEST = DeleteTopicsRequest

_Result = DeleteTopicsResponse.DeletableTopicResult


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        if ctx.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        return DeleteTopicsResponse(
            throttle_time_ms=0,
            responses=[
                _Result(
                    name=name, topic_id=topic_id, error_code=int(error_code_for(exc)), error_message=str(exc)
                )
                for name, topic_id in wanted
            ],
        )
    gone = [r.topic_id for r in response.responses if r.error_code == 0 and r.topic_id is not None]
    if gone:
        await wait_visible(ctx, lambda image: all(image.topic_by_id(topic_id) is None for topic_id in gone))
    return response
