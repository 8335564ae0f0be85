"""DescribeProducers (61, KIP-664): the active producers of partitions, from each Log's producer state.

Per producer: id, epoch, last sequence (-1 when no batch of the current epoch is cached), last
timestamp, coordinator epoch and the first offset of its open transaction (-1 if none). A topic or
partition we do not have gets UNKNOWN_TOPIC_OR_PARTITION, as in Kafka. Each topic needs READ, else
its partitions are TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import READ, TOPIC, allowed_names
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0
REQUEST = DescribeProducersRequest

_TopicResponse = DescribeProducersResponse.TopicResponse
_PartitionResponse = _TopicResponse.PartitionResponse
_ProducerState = _PartitionResponse.ProducerState


def _partition(ctx: RequestContext, topic: str, index: int) -> _PartitionResponse:
    try:
        partition = ctx.topics.get_partition(topic, index)
        entries = partition.log.producer_state.active_producers()
    except KafkaError as exc:
        return _PartitionResponse(
            partition_index=index,
            error_code=int(error_code_for(exc)),
            error_message=str(exc),
            active_producers=[],
        )
    producers = [
        _ProducerState(
            producer_id=entry.producer_id,
            producer_epoch=entry.epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=-1
            if entry.current_txn_first_offset is None
            else entry.current_txn_first_offset,
        )
        for entry in entries
    ]
    return _PartitionResponse(
        partition_index=index, error_code=0, error_message=None, active_producers=producers
    )


async def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    readable = allowed_names(ctx, READ, TOPIC, (t.name for t in request.topics))
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    topics = [
        _TopicResponse(
            name=topic.name,
            partitions=[
                _PartitionResponse(
                    partition_index=i, error_code=denied, error_message=None, active_producers=[]
                )
                if readable is not None and topic.name not in readable
                else _partition(ctx, topic.name, i)
                for i in topic.partition_indexes
            ],
        )
        for topic in request.topics
    ]
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
