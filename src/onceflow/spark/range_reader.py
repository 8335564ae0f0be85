"""Read one partition's offset range ``[from, until)`` as Arrow record batches (runs in executors).

Each Fetch response becomes one ``pyarrow.RecordBatch`` in the source's schema, built column by
column: Spark takes Arrow batches from a Python source without converting rows one by one, which is
about twice as fast as yielding tuples. With ``read_committed`` the records of aborted transactions
are dropped by the client's filter, and control batches (markers) never appear; both still consume
offsets, so a range can hold fewer rows than offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from onceflow.client.fetch_records import filter_batches
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.record_codec import decode_batches
from onceflow.spark.cluster import BlockingCluster
from onceflow.spark.offsets import OffsetRange
from onceflow.spark.options import EARLIEST

log = logging.getLogger(__name__)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
    ]
)
# The same, as Spark DDL (the source's schema()).
SPARK_SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)

MAX_EMPTY_FETCHES = 20  # fetches in a row that bring nothing although the range is not done
FETCH_MAX_WAIT_MS = 500


def records_to_arrow(topic: str, partition: int, records, ts_types) -> pa.RecordBatch:
    """Build one batch from decoded records (in offset order) and their batches' timestamp types."""
    n = len(records)
    # Record is a NamedTuple (offset, timestamp, key, value, headers): transpose in C, not per field.
    offsets, timestamps, keys, values, headers = zip(*records, strict=True)
    distinct_types = {t for _last, t in ts_types}
    if len(distinct_types) == 1:
        types = [distinct_types.pop()] * n
    else:
        types, batch_index = [], 0
        for offset in offsets:
            while ts_types[batch_index][0] < offset:
                batch_index += 1
            types.append(ts_types[batch_index][1])
    header_offsets = [0]
    header_keys: list[str] = []
    header_values: list[bytes | None] = []
    if any(headers):
        for record_headers in headers:
            for hkey, hvalue in record_headers:
                header_keys.append(hkey)
                header_values.append(hvalue)
            header_offsets.append(len(header_keys))
    else:
        header_offsets *= n + 1
    header_structs = pa.StructArray.from_arrays(
        [pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())],
        fields=list(HEADER_TYPE),
    )
    micros = [t * 1000 for t in timestamps]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(micros, pa.timestamp("us", tz="UTC")),
            pa.array(types, pa.int32()),
            pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), header_structs),
        ],
        schema=ARROW_SCHEMA,
    )


def read_range(
    cluster: BlockingCluster,
    offset_range: OffsetRange,
    *,
    isolation_level: int,
    partition_max_bytes: int = 1048576,
) -> Iterator[pa.RecordBatch]:
    """Yield the visible records of ``offset_range`` as Arrow batches, in offset order."""
    topic, partition = offset_range.topic, offset_range.partition
    position = offset_range.from_offset
    if position == EARLIEST:
        position = cluster.earliest([(topic, partition)])[(topic, partition)]
    until = offset_range.until_offset
    empty_fetches = 0
    while position < until:
        fetched = cluster.call(
            lambda c, pos=position: c.fetch(
                topic,
                {partition: pos},
                isolation_level=isolation_level,
                max_wait_ms=FETCH_MAX_WAIT_MS,
                partition_max_bytes=partition_max_bytes,
            )
        ).get(partition)
        data = fetched.records if fetched is not None else None
        if not data:
            empty_fetches += 1
            if empty_fetches >= MAX_EMPTY_FETCHES:
                raise KafkaError(
                    f"{topic}-{partition}: offsets {position}..{until} were planned but the broker "
                    f"returns nothing there (data lost or log truncated?)",
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                )
            continue
        empty_fetches = 0
        batches = list(decode_batches(data))
        records = list(
            filter_batches(
                batches,
                fetch_offset=position,
                isolation_level=isolation_level,
                aborted_transactions=fetched.aborted_transactions,
            )
        )
        next_position = batches[-1].header.last_offset + 1 if batches else position
        if next_position <= position:
            raise KafkaError(
                f"{topic}-{partition}: fetch at {position} made no progress", ErrorCode.CORRUPT_MESSAGE
            )
        in_range = [r for r in records if r.offset < until] if next_position > until else records
        if in_range:
            ts_types = [(b.header.last_offset, b.header.timestamp_type) for b in batches]
            yield records_to_arrow(topic, partition, in_range, ts_types)
        position = next_position
    log.debug("read %s-%d [%d, %d)", topic, partition, offset_range.from_offset, until)
