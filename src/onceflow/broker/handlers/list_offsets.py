"""ListOffsets (2): earliest, latest, max-timestamp and by-timestamp offsets of partitions.

Special timestamps (Kafka's ``ListOffsetsRequest``): -2 earliest, -1 latest (the high watermark, or
the last stable offset for read_committed), -3 the record with the largest timestamp (KIP-734),
-4 earliest local (= earliest without tiered storage), -5 latest tiered (none: -1, KIP-1005).
A timestamp >= 0 finds the first record with a timestamp at least that large; none gives -1/-1.
Each topic needs DESCRIBE, else its partitions are TOPIC_AUTHORIZATION_FAILED (Kafka's check).
"""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.replica.partition import leader_epoch_error
from onceflow.broker.security.access import DESCRIBE, TOPIC, allowed_names
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.record_codec import decode_batches
from onceflow.protocol.records import BatchHeader

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10
REQUEST = ListOffsetsRequest

LATEST = -1
# A replica id of -2 asks as Kafka's debug consumer: a follower answers too, up to its log end (what
# `onceflow cluster status` uses to show followers' lag).
DEBUG_REPLICA_ID = -2
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1
LOG_APPEND_TIME = 1

_TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
_PartitionResponse = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse


def _max_timestamp(plog, upper: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp in [log start, upper).

    Scans every batch header of the log (an admin query, rare; the log keeps no max-timestamp
    index), then decodes only the winning batch to find the record. A batch that began below the
    start (DeleteRecords moved it inside) is decoded at once: only its records from the start count.
    """
    start = plog.log_start_offset
    best_timestamp: int | None = None
    best: tuple[int, int] | None = None  # (timestamp, offset) of an exact record, or
    best_batch: tuple[BatchHeader, bytes] | None = None  # the batch to decode at the end
    for header, view in plog.iter_batches(start):
        if header.base_offset >= upper:
            break
        if header.is_control or header.last_offset >= upper:
            continue
        if header.base_offset < start:
            found = _first_max_record(bytes(view), header, start)
            if found is not None and (best_timestamp is None or found[0] > best_timestamp):
                best_timestamp, best, best_batch = found[0], found, None
        elif best_timestamp is None or header.max_timestamp > best_timestamp:
            best_timestamp, best, best_batch = header.max_timestamp, None, (header, bytes(view))
    if best is not None:
        return best[1], best[0]
    if best_batch is None:
        return None
    header, data = best_batch
    found = _first_max_record(data, header, start)
    return (found[1], found[0]) if found is not None else (header.last_offset, header.max_timestamp)


def _first_max_record(data: bytes, header: BatchHeader, start: int) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the batch's first record at or after ``start`` with the largest
    timestamp among those records."""
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.max_timestamp, max(header.base_offset, start)  # every record has the append time
    found = None
    for batch in decode_batches(data):
        for record in batch.records:
            if record.offset >= start and (found is None or record.timestamp > found[0]):
                found = (record.timestamp, record.offset)
    return found


def _lookup(plog, timestamp: int, read_committed: bool, replica: bool = False) -> tuple[int, int]:
    """``(offset, timestamp)`` for one partition's log; -1 for 'none'. A replica (a follower finding
    the leader's log end) sees the whole log; consumers see it up to the high watermark or LSO."""
    if replica:
        upper = plog.log_end_offset
    else:
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


def _failed(index: int, code: ErrorCode) -> _PartitionResponse:
    return _PartitionResponse(
        partition_index=index, error_code=int(code), timestamp=-1, offset=-1, leader_epoch=-1
    )


def _partition(
    ctx: RequestContext, topic: str, part, read_committed: bool, replica: bool, debug: bool = False
) -> _PartitionResponse:
    try:
        if debug:  # Kafka's debug replica id: any replica answers, with its own log end
            partition = ctx.topics.local_partition(topic, part.partition_index)
        else:
            partition = ctx.topics.get_partition(topic, part.partition_index)
        epoch_error = leader_epoch_error(getattr(part, "current_leader_epoch", -1), partition.leader_epoch)
        if epoch_error:
            raise KafkaError(f"leader epoch of {topic}-{part.partition_index}", epoch_error)
        plog = partition.log
        offset, timestamp = _lookup(plog, part.timestamp, read_committed, replica)
    except KafkaError as exc:
        return _failed(part.partition_index, error_code_for(exc))
    return _PartitionResponse(
        partition_index=part.partition_index,
        error_code=0,
        timestamp=timestamp,
        offset=offset,
        leader_epoch=partition.leader_epoch if offset >= 0 else -1,
    )


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    read_committed = ctx.api_version >= 2 and request.isolation_level == READ_COMMITTED
    debug = request.replica_id == DEBUG_REPLICA_ID
    replica = request.replica_id >= 0 or debug
    described = allowed_names(ctx, DESCRIBE, TOPIC, (t.name for t in request.topics))
    topics = [
        _TopicResponse(
            name=t.name,
            partitions=[
                _failed(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if described is not None and t.name not in described
                else _partition(ctx, t.name, p, read_committed, replica, debug)
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
