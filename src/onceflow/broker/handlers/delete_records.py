"""DeleteRecords (21, KIP-107): move partitions' log start offsets forward, as `kafka-delete-records`,
confluent-kafka's and kafka-python's ``delete_records`` ask.

Per partition, Kafka's rules: offset -1 means the high watermark; an offset below 0 or above the high
watermark is OFFSET_OUT_OF_RANGE; the internal topics are INVALID_TOPIC_EXCEPTION (their logs are the
coordinators' state); an unknown partition is UNKNOWN_TOPIC_OR_PARTITION. (Kafka refuses compacted
topics with POLICY_VIOLATION; onceflow's only cleanup.policy is ``delete``.) An offset below the
current start changes nothing. The answer's low watermark is the log start afterwards (-1 with an
error). The new start is durable before the answer (``Log.delete_records_before``); there are no
replicas to wait for, so ``timeout_ms`` is unused. Each topic needs DELETE, else
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import DELETE, TOPIC, allowed_names
from onceflow.protocol.errors import ErrorCode, InvalidTopic, KafkaError, error_code_for

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = DeleteRecordsRequest

HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK

_TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
_PartitionResult = _TopicResult.DeleteRecordsPartitionResult


def _delete(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    """The partition's log start after deleting the records below ``offset``."""
    found = ctx.topics.get(topic)
    if found is not None and found.internal:
        raise InvalidTopic(f"cannot delete records of internal topic {topic}")
    plog = ctx.topics.get_partition(topic, index).log
    return plog.delete_records_before(plog.high_watermark if offset == HIGH_WATERMARK else offset)


def _partition(ctx: RequestContext, topic: str, part) -> _PartitionResult:
    try:
        low_watermark = _delete(ctx, topic, part.partition_index, part.offset)
    except KafkaError as exc:
        return _PartitionResult(
            partition_index=part.partition_index, low_watermark=-1, error_code=int(error_code_for(exc))
        )
    return _PartitionResult(partition_index=part.partition_index, low_watermark=low_watermark, error_code=0)


async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    deletable = allowed_names(ctx, DELETE, TOPIC, (t.name for t in request.topics))
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    topics = [
        _TopicResult(
            name=t.name,
            partitions=[
                _PartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=denied)
                if deletable is not None and t.name not in deletable
                else _partition(ctx, t.name, p)
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
