"""ListOffsets (2): earliest, latest, max-timestamp and by-timestamp offsets of partitions.

Special timestamps (Kafka's ``ListOffsetsRequest``): -2 earliest, -1 latest (the high watermark, or
the last stable offset for read_committed), -3 the record with the largest timestamp (KIP-734),
-4 earliest local (= earliest without tiered storage), -5 latest tiered (none: -1, KIP-1005).
A timestamp >= 0 finds the first record with a timestamp at least that large; none gives -1/-1.
"""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from onceflow.broker.context import RequestContext
from onceflow.protocol.errors import KafkaError, error_code_for
from onceflow.protocol.record_codec import decode_batches
from onceflow.protocol.records import BatchHeader

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10
REQUEST = ListOffsetsRequest

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1
LOG_APPEND_TIME = 1
LEADER_EPOCH = 0  # one broker, never a leader change

_TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
_PartitionResponse = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse


def _max_timestamp(plog, upper: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp below ``upper``.

    Scans every batch header of the log (an admin query, rare; the log keeps no max-timestamp
    index), then decodes only the winning batch to find the record.
    """
    best: tuple[BatchHeader, bytes] | None = None
    for header, view in plog.iter_batches(plog.log_start_offset):
        if header.base_offset >= upper:
            break
        if header.is_control or header.last_offset >= upper:
            continue
        if best is None or header.max_timestamp > best[0].max_timestamp:
            best = (header, bytes(view))
    if best is None:
        return None
    header, data = best
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.base_offset, header.max_timestamp  # every record has the append time
    for batch in decode_batches(data):
        for record in batch.records:
            if record.timestamp == header.max_timestamp:
                return record.offset, record.timestamp
    return header.last_offset, header.max_timestamp


def _lookup(plog, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """``(offset, timestamp)`` for one partition's log; -1 for 'none'."""
    upper = plog.last_stable_offset if read_committed else plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == LATEST:
        return upper, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = _max_timestamp(plog, upper)
    else:
        found = plog.offset_for_timestamp(timestamp)
    if found is None or found[0] >= upper:
        return -1, -1
    offset, found_timestamp = found
    return offset, found_timestamp


def _partition(ctx: RequestContext, topic: str, part, read_committed: bool) -> _PartitionResponse:
    try:
        plog = ctx.topics.get_partition(topic, part.partition_index).log
        offset, timestamp = _lookup(plog, part.timestamp, read_committed)
    except KafkaError as exc:
        return _PartitionResponse(
            partition_index=part.partition_index,
            error_code=int(error_code_for(exc)),
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
    return _PartitionResponse(
        partition_index=part.partition_index,
        error_code=0,
        timestamp=timestamp,
        offset=offset,
        leader_epoch=LEADER_EPOCH if offset >= 0 else -1,
    )


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    read_committed = ctx.api_version >= 2 and request.isolation_level == READ_COMMITTED
    topics = [
        _TopicResponse(
            name=t.name, partitions=[_partition(ctx, t.name, p, read_committed) for p in t.partitions]
        )
        for t in request.topics
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
