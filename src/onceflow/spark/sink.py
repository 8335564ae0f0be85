"""The onceflow sink: ``df.writeStream.format("onceflow")`` and ``df.write.format("onceflow")``.

Rows come in as Arrow batches with Spark's Kafka-sink columns (checked when the write starts, see
:mod:`onceflow.spark.sink_options`): ``value`` required, optional ``key``, ``topic`` (the ``topic``
option overrides it, as in Spark's Kafka sink), ``partition`` and ``headers``. Two guarantees:

- ``exactly-once`` (default): each task writes inside a transaction and skips a batch it already
  committed (see :mod:`onceflow.spark.exactly_once` for the protocol and its contract). Rows may name
  any topics;
- ``at-least-once``: a plain producer, like Spark's own Kafka sink. A batch replayed after a crash
  is written again, so the output can hold duplicates. It exists as a baseline and for speed.

- ``exactly-once-atomic`` (streaming writes): as ``exactly-once``, but each task prepares its
  transaction (KIP-939) and the driver commits all of them together once the batch's intent is
  durable in the checkpoint, so a read_committed reader sees a micro-batch whole or not at all (see
  :mod:`onceflow.spark.two_phase` and :mod:`onceflow.spark.batch_intent`);

A batch write (``df.write...mode("append").save()``) is one batch of the same protocol, under a sink
id of its own: each task's records are written once even if Spark retries the task or runs a
speculative copy; saving the same DataFrame twice writes it twice, as with any append.

The driver's ``commit`` checks that every task reported; Spark then writes the batch to its commit
log. ``abort`` only logs: a failed task's open transaction is aborted by the next attempt's
``init_transactions`` or by ``transaction.timeout.ms``.

Batch-atomic, the driver's ``commit(N)`` creates batch N's intent (every task's prepared state) in the
checkpoint, then completes every transaction, then marks the intent completed. ``abort(N)`` finishes
batch N's intent if there is one of this driver's tasks (the decision to commit was taken) and
otherwise aborts what its tasks prepared. A driver that finds another driver's intent for batch N, or
its prepared transactions replaced by another writer's (a second query on the checkpoint took the
transactional ids over), is fenced: it raises :class:`SinkFenced` without completing or aborting
anything of the other's, and takes its own intent back. PySpark makes the stream writer anew for each driver commit and for the tasks' plan,
before any task of a batch runs: so the writer, when made, first finishes the last intent if a crashed
driver left it incomplete, and Spark replays nothing before that.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from onceflow.spark import faults
from onceflow.spark.exactly_once import (
    OutputChunk,
    OutputRecord,
    TaskOutcome,
    transactional_id_for,
    write_exactly_once,
)
from onceflow.spark.sink_options import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE_ATOMIC,
    SinkOptions,
    producer_settings,
)

log = logging.getLogger(__name__)

__all__ = [
    "OnceflowBatchWriter",
    "OnceflowStreamWriter",
    "SinkCommitMessage",
    "SinkFenced",
    "SinkIncomplete",
    "output_items",
    "output_records",
]

# Rows of one Arrow batch that name more topics than this go record by record, not as a chunk per topic.
MAX_CHUNKED_TOPICS = 64


class SinkIncomplete(RuntimeError):
    """The driver's commit found a task that did not report; the batch must not be committed."""


class SinkFenced(RuntimeError):
    """Batch-atomic: another driver writes with this sink's transactional ids (a second query on the
    checkpoint, or one with the same ``transactional.id.prefix``) and took the batch over; this
    driver completes nothing of it and stops."""


_FENCED = (
    "this driver is fenced: it completes nothing more of the batch and stops (is another query running on "
    "this checkpoint, or with the same transactional.id.prefix? The other query's output stands)"
)


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    partition_id: int
    attempt: int
    batch_id: int
    records: int
    skipped: bool = False
    # Batch-atomic mode: the task's transactional id and its prepared state ("" when it prepared
    # nothing: no rows, or the batch was already written).
    transactional_id: str = ""
    prepared: str = ""
    prepared_ms: int = 0  # when the task's transaction was prepared (wall clock, ms)


def _as_binary(column: pa.Array | pa.ChunkedArray) -> list:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    return column.to_pylist()


def _check_value_column(batch: pa.RecordBatch) -> None:
    if "value" not in batch.schema.names:
        raise ValueError('the sink needs a "value" column (binary or string); alias one with .alias("value")')


def output_records(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[OutputRecord]:
    """The records one Arrow batch asks the sink to write, in row order."""
    _check_value_column(batch)
    names = set(batch.schema.names)
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
            raise ValueError(f"row {i} has a null topic; set the topic option or give every row a topic")
        yield OutputRecord(topics[i], keys[i], values[i], headers[i], partitions[i])


def _chunk(batch: pa.RecordBatch, topic: str) -> OutputChunk:
    names = batch.schema.names
    headers = None
    if "headers" in names and batch.column("headers").null_count < batch.num_rows:
        headers = [
            [(h["key"], h["value"]) for h in row] if row else None
            for row in batch.column("headers").to_pylist()
        ]
    return OutputChunk(
        topic,
        _as_binary(batch.column("key")) if "key" in names else None,
        _as_binary(batch.column("value")),
        headers,
    )


def output_items(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[OutputRecord | OutputChunk]:
    """What one Arrow batch asks the sink to write: one :class:`OutputChunk` (columns, no object per
    row) per topic its rows name, when no ``partition`` column places rows; otherwise the rows as
    :class:`OutputRecord`, in row order. Within a topic, rows keep their order."""
    _check_value_column(batch)
    if batch.num_rows == 0:
        return
    names = set(batch.schema.names)
    if "partition" in names:
        yield from output_records(batch, topic_option)
        return
    if topic_option is not None:
        yield _chunk(batch, topic_option)
        return
    if "topic" not in names:
        raise ValueError('say where to write: option "topic" or a "topic" column')
    topics = batch.column("topic")
    if topics.null_count:
        yield from output_records(batch, topic_option)  # names the row with no topic
        return
    distinct = pc.unique(topics)
    if len(distinct) == 1:
        yield _chunk(batch, distinct[0].as_py())
    elif len(distinct) <= MAX_CHUNKED_TOPICS:
        for topic in distinct.to_pylist():
            yield _chunk(batch.filter(pc.equal(topics, topic)), topic)
    else:
        yield from output_records(batch, topic_option)


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


def _make_transactional_writer(options: SinkOptions, transactional_id: str):
    """The client-backed :class:`~onceflow.spark.exactly_once.TransactionalWriter`."""
    from onceflow.spark.client_writer import ClientTransactionalWriter

    return ClientTransactionalWriter(
        options, transactional_id, two_phase=options.guarantee == EXACTLY_ONCE_ATOMIC
    )


class _SinkTasks:
    """What the streaming and the batch writer share: one task's write, the driver's checks."""

    options: SinkOptions

    def _sink_id(self, context: TaskContext) -> str:
        raise NotImplementedError

    def _batch_id(self, context: TaskContext) -> int:
        raise NotImplementedError

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        context = TaskContext.get()
        batch_id = self._batch_id(context)
        partition_id = context.partitionId()
        records = (r for batch in iterator for r in output_items(batch, self.options.topic))
        transactional_id = ""
        if self.options.guarantee == AT_LEAST_ONCE:
            outcome = TaskOutcome(_produce_at_least_once(self.options, records), skipped=False)
        else:
            transactional_id = transactional_id_for(self._sink_id(context), partition_id)
            writer = _make_transactional_writer(self.options, transactional_id)
            atomic = self.options.guarantee == EXACTLY_ONCE_ATOMIC
            try:
                outcome = write_exactly_once(writer, batch_id, records, prepare=atomic)
                if atomic and outcome.prepared:
                    faults.on_task_prepared(batch_id, partition_id, context.attemptNumber())
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
            partition_id,
            context.attemptNumber(),
            batch_id,
            outcome.records,
            outcome.skipped,
            transactional_id,
            outcome.prepared,
            time.time_ns() // 1_000_000 if outcome.prepared else 0,
        )

    def _check_reports(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        missing = [i for i, m in enumerate(messages) if not isinstance(m, SinkCommitMessage)]
        if missing:
            raise SinkIncomplete(
                f"batch {batch_id}: tasks {missing} did not report; not committing the batch"
            )
        stale = [m.partition_id for m in messages if m.batch_id not in (batch_id, -1)]
        if stale:
            raise SinkIncomplete(f"batch {batch_id}: tasks {stale} reported another batch id")
        log.info(
            "batch %d committed: %d records from %d tasks (%d skipped)",
            batch_id,
            sum(m.records for m in messages),
            len(messages),
            sum(1 for m in messages if m.skipped),
        )

    def _log_abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        reported = sum(1 for m in messages if m is not None)
        log.warning("batch %d aborted (%d of %d tasks had reported)", batch_id, reported, len(messages))


class OnceflowStreamWriter(_SinkTasks, DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.atomic: BatchAtomicCommits | None = None
        if options.guarantee == EXACTLY_ONCE_ATOMIC:
            self.atomic = BatchAtomicCommits(options)
            self.atomic.finish_last_intent()

    def _sink_id(self, context: TaskContext) -> str:
        if self.atomic is not None:
            return self.atomic.sink_id
        if self.options.transactional_id_prefix:
            return self.options.transactional_id_prefix
        # The query id survives restarts from the same checkpoint, so the ids stay stable.
        return f"onceflow-sink-{context.getLocalProperty('sql.streaming.queryId')}"

    def _batch_id(self, context: TaskContext) -> int:
        return int(context.getLocalProperty("streaming.sql.batchId") or -1)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._check_reports(messages, batchId)
        if self.atomic is not None:
            self.atomic.commit(messages, batchId)
        faults.on_driver_commit(batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._log_abort(messages, batchId)
        if self.atomic is not None:
            self.atomic.abort(messages, batchId)


class BatchAtomicCommits:
    """The driver's part of ``guarantee=exactly-once-atomic``: the intent in the checkpoint, and the
    completions (:mod:`onceflow.spark.two_phase`). Made on the driver, with the stream writer."""

    def __init__(self, options: SinkOptions) -> None:
        from onceflow.spark.batch_intent import IntentLog, checkpoint_path, query_id_of
        from onceflow.spark.two_phase import check_broker_supports_two_phase_commit

        if not options.checkpoint_location:
            raise ValueError("guarantee=exactly-once-atomic needs the query's checkpointLocation")
        checkpoint = checkpoint_path(options.checkpoint_location)
        check_broker_supports_two_phase_commit(options)
        self.options = options
        self.intents = IntentLog(checkpoint)
        if options.transactional_id_prefix:
            self.sink_id = options.transactional_id_prefix
        else:
            # The same ids as the per-task mode's: the query id, which Spark keeps in the checkpoint.
            query_id = query_id_of(checkpoint)
            if query_id is None:
                raise ValueError(
                    f"guarantee=exactly-once-atomic: no query id in {checkpoint}/metadata; "
                    "set the sink option transactional.id.prefix"
                )
            self.sink_id = f"onceflow-sink-{query_id}"

    def finish_last_intent(self) -> None:
        """Complete the last batch's transactions if a driver crashed while completing them."""
        intent = self.intents.read()
        if intent is None or intent.completed:
            return
        log.warning(
            "batch %d: its intent was written but not completed (a driver stopped); completing its %d "
            "transactions before anything runs",
            intent.batch_id,
            len(intent.transactions),
        )
        self._complete(intent)

    def commit(self, messages: list[SinkCommitMessage], batch_id: int) -> None:
        from onceflow.spark.batch_intent import BatchIntent
        from onceflow.spark.two_phase import TransactionsTakenOver, commit_prepared

        batch_end_ms = time.time_ns() // 1_000_000
        faults.on_driver_before_intent(batch_id)
        prepared = _prepared_by(messages)
        intent = BatchIntent(
            batch_id,
            prepared,
            decided_ms=time.time_ns() // 1_000_000,
            batch_end_ms=batch_end_ms,
            tasks_ended_ms=max((m.prepared_ms for m in messages if m.prepared), default=0),
        )
        # The decision: once the intent is durable, the batch commits. Taken once per batch.
        existing = self.intents.create(intent)
        if existing is not None:
            if not prepared or existing.completed and existing.transactions == prepared:
                return  # a replay that wrote nothing, or this very intent carried out already
            if existing.transactions != prepared:
                raise SinkFenced(
                    f"batch {batch_id}: another driver decided this batch first (its intent "
                    f"{self.intents.directory / str(batch_id)} lists other transactions); {_FENCED}"
                )
            intent = existing
        durable_ms = time.time_ns() // 1_000_000
        faults.on_driver_intent(batch_id)
        try:
            commit_prepared(
                self.options,
                intent.transactions,
                after_each=lambda done: faults.on_driver_completion(batch_id, done),
            )
        except TransactionsTakenOver as exc:
            if exc.before_any:
                self.intents.withdraw(intent)  # nothing of it was completed: the other driver decides
            raise SinkFenced(f"batch {batch_id}: {exc}; {_FENCED}") from None
        completed_ms = time.time_ns() // 1_000_000
        self.intents.write(dataclasses.replace(intent, completed_ms=completed_ms), durable=False)
        log.info(
            "batch %d committed atomically: %d transactions, %d ms after the commit began (intent durable "
            "after %d ms)",
            batch_id,
            len(intent.transactions),
            completed_ms - batch_end_ms,
            durable_ms - batch_end_ms,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        from onceflow.spark.two_phase import abort_all

        prepared = _prepared_by(messages)
        intent = self.intents.read(batch_id)
        if intent is not None and intent.transactions == prepared:
            if not intent.completed:
                self._complete(intent)  # the decision to commit was taken: it stands
            return
        if intent is not None:
            # Another driver's decision: only what this driver's tasks prepared is aborted, if open.
            log.warning("batch %d was decided by another driver; aborting only this driver's part", batch_id)
            abort_all(self.options, (), prepared)
            return
        ids = {transactional_id_for(self.sink_id, i) for i, m in enumerate(messages) if m is None}
        abort_all(self.options, ids, prepared)
        log.info("batch %d: aborted the transactions of its %d tasks", batch_id, len(messages))

    def _complete(self, intent) -> None:
        from onceflow.spark.two_phase import complete_all

        open_ = complete_all(
            self.options,
            intent.transactions,
            after_each=lambda done: faults.on_driver_completion(intent.batch_id, done),
            decided_ms=intent.decided_ms,
        )
        self.intents.write(dataclasses.replace(intent, completed_ms=time.time_ns() // 1_000_000))
        log.info(
            "batch %d committed atomically: %d transactions (%d still open)",
            intent.batch_id,
            len(intent.transactions),
            open_,
        )


def _prepared_by(messages: list[WriterCommitMessage | None]) -> dict[str, str]:
    """What the batch's tasks prepared: ``{transactional id: prepared state}``."""
    return {
        m.transactional_id: m.prepared for m in messages if isinstance(m, SinkCommitMessage) and m.prepared
    }


class OnceflowBatchWriter(_SinkTasks, DataSourceArrowWriter):
    """``df.write.format("onceflow").mode("append").save()``: batch 0 of a sink of its own, whose id is
    made when the write is planned (the same for every attempt of its tasks, new for every save)."""

    def __init__(self, options: SinkOptions) -> None:
        if options.guarantee == EXACTLY_ONCE_ATOMIC:
            raise ValueError(
                "guarantee=exactly-once-atomic is for streaming writes (its intent lives in the query's "
                "checkpoint); a batch write is exactly once per task: use guarantee=exactly-once"
            )
        self.options = options
        self.sink_id = f"{options.transactional_id_prefix or 'onceflow-write'}-{uuid.uuid4().hex}"

    def _sink_id(self, context: TaskContext) -> str:
        return self.sink_id

    def _batch_id(self, context: TaskContext) -> int:
        return 0

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._check_reports(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._log_abort(messages, 0)
