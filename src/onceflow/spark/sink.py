"""The onceflow sink: ``df.writeStream.format("onceflow")``.

Rows come in as Arrow batches with Spark's Kafka-sink columns: ``value`` (required, binary or
string), optional ``key``, ``topic`` (the ``topic`` option overrides it, as in Spark's Kafka sink),
``partition`` and ``headers``. Two guarantees:

- ``exactly-once`` (default): each task writes inside a transaction and skips a batch it already
  committed (see :mod:`onceflow.spark.exactly_once` for the protocol and its contract);
- ``at-least-once``: a plain producer, like Spark's own Kafka sink. A batch replayed after a crash
  is written again, so the output can hold duplicates. It exists as a baseline and for speed.

The driver's ``commit`` checks that every task reported; Spark then writes the batch to its commit
log. ``abort`` only logs: a failed task's open transaction is aborted by the next attempt's
``init_transactions`` or by ``transaction.timeout.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from onceflow.spark import faults
from onceflow.spark.exactly_once import (
    OutputChunk,
    OutputRecord,
    TaskOutcome,
    transactional_id_for,
    write_exactly_once,
)
from onceflow.spark.options import AT_LEAST_ONCE, SinkOptions, producer_settings

log = logging.getLogger(__name__)

__all__ = ["OnceflowStreamWriter", "SinkCommitMessage", "SinkIncomplete", "output_items", "output_records"]


class SinkIncomplete(RuntimeError):
    """The driver's commit found a task that did not report; the batch must not be committed."""


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    partition_id: int
    attempt: int
    batch_id: int
    records: int
    skipped: bool = False


def _as_binary(column: pa.Array | pa.ChunkedArray) -> list:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    return column.to_pylist()


def output_records(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[OutputRecord]:
    """The records one Arrow batch asks the sink to write, in row order."""
    names = set(batch.schema.names)
    if "value" not in names:
        raise ValueError('the sink needs a "value" column (binary or string); alias one with .alias("value")')
    n = batch.num_rows
    values = _as_binary(batch.column("value"))
    keys = _as_binary(batch.column("key")) if "key" in names else [None] * n
    if topic_option is not None:
        topics = [topic_option] * n
    elif "topic" in names:
        topics = batch.column("topic").to_pylist()
    else:
        raise ValueError('say where to write: option "topic" or a "topic" column')
    partitions = batch.column("partition").to_pylist() if "partition" in names else [None] * n
    if "headers" in names:
        headers = [
            [(h["key"], h["value"]) for h in row] if row else ()
            for row in batch.column("headers").to_pylist()
        ]
    else:
        headers = [()] * n
    for i in range(n):
        if topics[i] is None:
            raise ValueError(f"row {i} has a null topic")
        yield OutputRecord(topics[i], keys[i], values[i], headers[i], partitions[i])


def output_items(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[OutputRecord | OutputChunk]:
    """What one Arrow batch asks the sink to write: one :class:`OutputChunk` (columns, no object per
    row) when every row goes to the same topic and no ``partition`` column places rows; otherwise
    the rows as :class:`OutputRecord`, in row order."""
    names = set(batch.schema.names)
    if "value" not in names:
        raise ValueError('the sink needs a "value" column (binary or string); alias one with .alias("value")')
    if batch.num_rows == 0:
        return
    topic = topic_option
    if topic is None and "topic" in names:
        topics = batch.column("topic")
        if topics.null_count == 0 and len(pc.unique(topics)) == 1:
            topic = topics[0].as_py()
    if topic is None or "partition" in names:
        yield from output_records(batch, topic_option)
        return
    headers = None
    if "headers" in names and batch.column("headers").null_count < batch.num_rows:
        headers = [
            [(h["key"], h["value"]) for h in row] if row else None
            for row in batch.column("headers").to_pylist()
        ]
    yield OutputChunk(
        topic,
        _as_binary(batch.column("key")) if "key" in names else None,
        _as_binary(batch.column("value")),
        headers,
    )


def _produce_at_least_once(options: SinkOptions, records: Iterable[OutputRecord | OutputChunk]) -> int:
    """Plain produce, like Spark's Kafka sink: the idempotent producer (no duplicates from its own
    retries) without a transaction, so a replayed batch or a retried task writes its records again."""
    from onceflow.client import Producer

    settings = producer_settings(options.extra, {"bootstrap.servers", "transactional.id"})
    failures: list[BaseException] = []

    def on_delivery(_metadata, error) -> None:
        if error is not None and not failures:
            failures.append(error)

    count = 0
    producer = Producer({**settings, "bootstrap.servers": options.bootstrap, "client.id": options.client_id})
    try:
        batch_futures = []
        for record in records:
            if type(record) is OutputChunk:
                batch_futures += producer.send_many(
                    record.topic, record.values, record.keys, headers=record.headers
                )
                count += len(record.values)
                continue
            producer.send(
                record.topic,
                record.value,
                key=record.key,
                partition=record.partition,
                headers=record.headers or None,
                callback=on_delivery,
            )
            count += 1
        producer.flush()
        if failures:
            raise failures[0]
        for future in batch_futures:
            future.result()  # raises the error of a batch that failed
    finally:
        producer.close()
    return count


def _make_transactional_writer(options: SinkOptions, transactional_id: str, default_topic: str | None):
    """The client-backed :class:`~onceflow.spark.exactly_once.TransactionalWriter`."""
    from onceflow.spark.client_writer import ClientTransactionalWriter

    return ClientTransactionalWriter(options, transactional_id, default_topic)


class OnceflowStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def _sink_id(self, context: TaskContext) -> str:
        if self.options.transactional_id_prefix:
            return self.options.transactional_id_prefix
        # The query id survives restarts from the same checkpoint, so the ids stay stable.
        return f"onceflow-sink-{context.getLocalProperty('sql.streaming.queryId')}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        context = TaskContext.get()
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or -1)
        partition_id = context.partitionId()
        records = (r for batch in iterator for r in output_items(batch, self.options.topic))
        if self.options.guarantee == AT_LEAST_ONCE:
            outcome = TaskOutcome(_produce_at_least_once(self.options, records), skipped=False)
        else:
            transactional_id = transactional_id_for(self._sink_id(context), partition_id)
            writer = _make_transactional_writer(self.options, transactional_id, self.options.topic)
            try:
                outcome = write_exactly_once(writer, batch_id, records)
            finally:
                writer.close()
        log.info(
            "sink task %d (attempt %d) batch %d: %d records%s",
            partition_id,
            context.attemptNumber(),
            batch_id,
            outcome.records,
            " (already committed, skipped)" if outcome.skipped else "",
        )
        return SinkCommitMessage(
            partition_id, context.attemptNumber(), batch_id, outcome.records, outcome.skipped
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        missing = [i for i, m in enumerate(messages) if not isinstance(m, SinkCommitMessage)]
        if missing:
            raise SinkIncomplete(f"batch {batchId}: tasks {missing} did not report; not committing the batch")
        stale = [m.partition_id for m in messages if m.batch_id not in (batchId, -1)]
        if stale:
            raise SinkIncomplete(f"batch {batchId}: tasks {stale} reported another batch id")
        written = sum(m.records for m in messages)
        skipped = sum(1 for m in messages if m.skipped)
        log.info(
            "batch %d committed: %d records from %d tasks (%d skipped)",
            batchId,
            written,
            len(messages),
            skipped,
        )
        faults.on_driver_commit(batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        reported = sum(1 for m in messages if m is not None)
        log.warning("batch %d aborted (%d of %d tasks had reported)", batchId, reported, len(messages))
