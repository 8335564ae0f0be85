"""Read one partition's offset range ``[from, until)`` as Arrow record batches (runs in executors).

Each Fetch response becomes one ``pyarrow.RecordBatch`` in the source's schema, built column by
column straight from the record batches, with no object per record (about 2x faster than decoding
``Record`` tuples first). Spark takes Arrow batches from a Python source without converting rows one
by one, which is about twice as fast as yielding tuples. With ``read_committed`` the records of
aborted transactions are dropped (the same rule as ``client.fetch_records``, applied per batch), and
control batches (markers) never appear; both still consume offsets, so a range can hold fewer rows
than offsets.

Records of a range can be gone by the time a task reads them: retention or DeleteRecords moved the
partition's log start past them. Like Spark's Kafka source, the read then fails with a message
naming the lost offsets and the ``failOnDataLoss`` option, or, with ``failOnDataLoss=false``, goes on
from the log start after a warning. Records planned but not returned for ``kafkaConsumer.pollTimeoutMs``
fail the read, as in Spark. The ``headers`` column is there only with ``includeHeaders=true``.
"""

from __future__ import annotations

import heapq
import logging
import time
from bisect import bisect_left
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from onceflow.client.fetch_records import READ_COMMITTED
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.record_codec import RecordColumns, decode_columns, decode_control, split_batches
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
ARROW_SCHEMA_NO_HEADERS = pa.schema(list(ARROW_SCHEMA)[:-1])
# The same, as Spark types (the source's schema()).
_SPARK_FIELDS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
    ("headers", "array<struct<key:string,value:binary>>"),
]


def source_schema_fields(include_headers: bool) -> list[tuple[str, str]]:
    """The source's columns as ``(name, Spark type)``; ``headers`` only with includeHeaders."""
    return _SPARK_FIELDS if include_headers else _SPARK_FIELDS[:-1]


def source_schema_ddl(include_headers: bool) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in source_schema_fields(include_headers))


FETCH_MAX_WAIT_MS = 500


class _Columns:
    """The visible records of one fetch, gathered batch by batch into column lists."""

    __slots__ = ("offsets", "timestamps", "keys", "values", "headers", "types", "has_headers")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list] = []
        self.types: list[int] = []
        self.has_headers = False

    def add(self, columns: RecordColumns, timestamp_type: int, low: int, high: int) -> None:
        """Add the records with ``low <= offset < high`` (offsets increase within a batch)."""
        offsets = columns.offsets
        start, stop = 0, len(offsets)
        if offsets and (offsets[0] < low or offsets[-1] >= high):
            start = bisect_left(offsets, low)
            stop = bisect_left(offsets, high)
        if start >= stop:
            return
        whole = start == 0 and stop == len(offsets)
        count = stop - start
        self.offsets += offsets if whole else offsets[start:stop]
        self.timestamps += columns.timestamps if whole else columns.timestamps[start:stop]
        self.keys += columns.keys if whole else columns.keys[start:stop]
        self.values += columns.values if whole else columns.values[start:stop]
        self.types += [timestamp_type] * count
        if columns.headers is not None:
            if not self.has_headers:
                self.headers = [[] for _ in range(len(self.offsets) - count)]
                self.has_headers = True
            self.headers += columns.headers[start:stop]
        elif self.has_headers:
            self.headers += [[] for _ in range(count)]

    def to_arrow(self, topic: str, partition: int, include_headers: bool = True) -> pa.RecordBatch:
        n = len(self.offsets)
        # Kafka timestamps are milliseconds; Arrow's column is microseconds: scale in C.
        millis = pa.array(self.timestamps, pa.int64())
        micros = pc.multiply(millis, pa.scalar(1000, pa.int64())).cast(pa.timestamp("us", tz="UTC"))
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            micros,
            pa.array(self.types, pa.int32()),
        ]
        if not include_headers:
            return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_NO_HEADERS)
        header_offsets = [0]
        header_keys: list[str] = []
        header_values: list[bytes | None] = []
        if self.has_headers:
            for record_headers in self.headers:
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
        columns.append(pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), header_structs))
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def fetch_to_arrow(
    topic: str,
    partition: int,
    data: bytes,
    *,
    position: int,
    until: int,
    isolation_level: int,
    aborted_transactions=(),
    include_headers: bool = True,
) -> tuple[pa.RecordBatch | None, int]:
    """The visible records of one fetched partition with ``position <= offset < until`` as one Arrow
    batch (None when there are none), and the offset after the last complete batch in ``data``.

    Records are decoded straight into columns, batch by batch; batches are dropped whole, as
    Kafka's read_committed consumers drop them: control batches, and the transactional batches of a
    producer from the first offset of its aborted transaction (listed in the fetch response) until
    its abort marker.
    """
    pending = [(first_offset, producer_id) for producer_id, first_offset in aborted_transactions]
    heapq.heapify(pending)
    aborted_producers: set[int] = set()
    read_committed = isolation_level == READ_COMMITTED
    columns = _Columns()
    next_position = position
    for header, batch in split_batches(data):
        last_offset = header.last_offset
        next_position = last_offset + 1
        if read_committed and header.producer_id >= 0:
            while pending and pending[0][0] <= last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
            if header.is_control:
                if not decode_control(header, batch).commit:
                    aborted_producers.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_producers:
                continue
        if header.is_control or last_offset < position or header.base_offset >= until:
            continue
        columns.add(decode_columns(header, batch), header.timestamp_type, position, until)
    if not columns.offsets:
        return None, next_position
    return columns.to_arrow(topic, partition, include_headers), next_position


class DataLoss(KafkaError):
    """Records planned for a read are no longer in the log (OFFSET_OUT_OF_RANGE on the wire)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


def read_range(
    cluster: BlockingCluster,
    offset_range: OffsetRange,
    *,
    isolation_level: int,
    partition_max_bytes: int = 1048576,
    fail_on_data_loss: bool = True,
    include_headers: bool = True,
    poll_timeout_ms: int = 120_000,
) -> Iterator[pa.RecordBatch]:
    """Yield the visible records of ``offset_range`` as Arrow batches, in offset order. Raises
    ``DataLoss`` if records of the range were deleted first, unless ``fail_on_data_loss`` is False:
    then the read skips them (and logs a warning). Fails when the broker returns nothing where records
    are planned for ``poll_timeout_ms``."""
    topic, partition = offset_range.topic, offset_range.partition
    position = offset_range.from_offset
    if position == EARLIEST:
        position = cluster.earliest([(topic, partition)])[(topic, partition)]
    until = offset_range.until_offset
    waiting_since = None
    while position < until:
        try:
            fetched = cluster.call(
                lambda c, pos=position: c.fetch(
                    topic,
                    {partition: pos},
                    isolation_level=isolation_level,
                    max_wait_ms=FETCH_MAX_WAIT_MS,
                    partition_max_bytes=partition_max_bytes,
                )
            ).get(partition)
        except KafkaError as exc:
            if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            position = _past_lost_records(cluster, topic, partition, position, until, fail_on_data_loss, exc)
            continue
        data = fetched.records if fetched is not None else None
        if not data:
            now = time.monotonic()
            waiting_since = now if waiting_since is None else waiting_since
            if now - waiting_since >= poll_timeout_ms / 1000:
                raise KafkaError(
                    f"{topic}-{partition}: offsets {position}..{until - 1} were planned but the broker "
                    f"returned nothing there for {poll_timeout_ms} ms (the source option "
                    "kafkaConsumer.pollTimeoutMs); data lost or log truncated?",
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                )
            continue
        waiting_since = None
        batch, next_position = fetch_to_arrow(
            topic,
            partition,
            data,
            position=position,
            until=until,
            isolation_level=isolation_level,
            aborted_transactions=fetched.aborted_transactions,
            include_headers=include_headers,
        )
        if next_position <= position:
            raise KafkaError(
                f"{topic}-{partition}: fetch at {position} made no progress", ErrorCode.CORRUPT_MESSAGE
            )
        if batch is not None:
            yield batch
        position = next_position
    log.debug("read %s-%d [%d, %d)", topic, partition, offset_range.from_offset, until)


def _past_lost_records(
    cluster: BlockingCluster,
    topic: str,
    partition: int,
    position: int,
    until: int,
    fail_on_data_loss: bool,
    refusal: KafkaError,
) -> int:
    """Where to read on after a fetch at ``position`` was OFFSET_OUT_OF_RANGE: the log start, if the
    records below it were deleted and ``fail_on_data_loss`` is False. Raises ``DataLoss`` if they
    were and it is True, and the broker's refusal itself if the offset is not below the start."""
    log_start = cluster.earliest([(topic, partition)])[(topic, partition)]
    if position >= log_start:
        raise refusal
    lost_until = min(log_start, until)
    what = f"{topic}-{partition}: offsets {position}..{lost_until - 1} were deleted before they were read"
    if fail_on_data_loss:
        raise DataLoss(
            f"{what} (retention or DeleteRecords moved the log start to {log_start}). If the query "
            f'should skip lost records instead of failing, set the source option failOnDataLoss "false".'
        )
    log.warning("%s; skipping them (failOnDataLoss=false), reading on from %d", what, log_start)
    return log_start
