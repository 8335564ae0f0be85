"""DeleteTopics (20): remove topics (by name; by name or id from v6) with their partitions' logs and
every group's committed offsets of those partitions."""

from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6
REQUEST = DeleteTopicsRequest

_Result = DeleteTopicsResponse.DeletableTopicResult


def _delete(ctx: RequestContext, name: str | None, topic_id) -> _Result:
    if name is None and topic_id is not None:
        topic = ctx.topics.get_by_id(topic_id)
        if topic is None:
            return _Result(
                name=None, topic_id=topic_id, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), error_message=None
            )
        name = topic.name
    try:
        deleted = ctx.topics.delete_topic(name)
    except KafkaError as exc:
        return _Result(
            name=name, topic_id=topic_id, error_code=int(error_code_for(exc)), error_message=str(exc)
        )
    ctx.groups.on_partitions_deleted((name, p.index) for p in deleted.partitions)
    return _Result(name=name, topic_id=deleted.topic_id, error_code=0, error_message=None)


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        results = [_delete(ctx, t.name, t.topic_id) for t in request.topics]
    else:
        results = [_delete(ctx, name, None) for name in request.topic_names]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
