"""The exactly-once write protocol of one sink task, independent of Spark and of the client.

Each task of batch N writes its partition inside one Kafka transaction whose ``transactional.id``
is ``<sink id>-<spark partition id>``: stable across retries, replays and speculative copies, so
``init_transactions`` fences whichever attempt came before. In the same transaction it commits a
marker saying "batch N is written": an offset commit in the task's own consumer group (the group id is
the transactional id), through ``send_offsets_to_transaction``, on partition 0 of every topic the task
wrote in batch N. Before writing, the task reads the marker on the topic of its first record (OffsetFetch
``require_stable``); if it says batch N or later, the batch's output is already there and the task
writes nothing.

Why the first record's topic is enough, whatever topics the rows choose: a replay of batch N holds the
same records as the attempt that committed (Spark's own condition for replays: the processing of a
batch is deterministic, so partition P of batch N holds the same records every time, though maybe in
another order). So the replay's first record goes to a topic that the committed attempt wrote, whose
marker says N. If no attempt committed, every topic's marker is older (a later batch runs only after
Spark committed this one), so the batch is written. The marker constrains nothing: rows may name any
topic, and with the ``topic`` option there is one topic, as before.

This makes a replay of batch N after a driver crash (Kafka committed, Spark's commit log not yet
written), a task retry, and a speculative copy all produce batch N's records exactly once. Consumers of
the output must use ``read_committed``. A batch is atomic per task, not across tasks: consumers can see
task 1's part of batch N before task 2's.

The batch-atomic mode (``guarantee=exactly-once-atomic``, :mod:`onceflow.spark.two_phase`) runs the
same protocol with KIP-939 two-phase commit producers and stops one step short: the transaction,
marker included, is prepared instead of committed, and the driver commits every task's transaction
together once the batch's intent is durable. The marker then appears with the batch, so a replay of
a completed batch writes nothing, as above.

:class:`TransactionalWriter` is the small interface a transactional producer must offer; the sink
runs on whichever implementation the client provides.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable
from itertools import chain
from typing import NamedTuple, Protocol

log = logging.getLogger(__name__)

__all__ = [
    "OutputChunk",
    "OutputRecord",
    "TaskOutcome",
    "TransactionalWriter",
    "decode_marker",
    "encode_marker",
    "transactional_id_for",
    "write_exactly_once",
]


class OutputRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | tuple = ()
    partition: int | None = None


class OutputChunk(NamedTuple):
    """Many records for one topic as columns (``keys``/``headers``: None or one entry per value);
    partitions are chosen by the producer's partitioner, as for an :class:`OutputRecord` without one."""

    topic: str
    keys: list[bytes | None] | None
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]] | None] | None = None


class TaskOutcome(NamedTuple):
    records: int
    skipped: bool  # batch already committed by an earlier attempt: nothing written
    prepared: str = ""  # batch-atomic mode: the PreparedTxnState of the task's transaction, as text


def transactional_id_for(sink_id: str, partition_id: int) -> str:
    return f"{sink_id}-{partition_id}"


def encode_marker(batch_id: int, **extra: object) -> str:
    """Offset-commit metadata saying batch ``batch_id`` of this task is committed."""
    return json.dumps({"batch": batch_id, **extra}, separators=(",", ":"), sort_keys=True)


def decode_marker(metadata: str | None) -> int | None:
    """The batch id in a marker, or None when there is no marker (or someone else's metadata)."""
    if not metadata:
        return None
    try:
        batch = json.loads(metadata).get("batch")
    except (ValueError, AttributeError):
        return None
    return batch if isinstance(batch, int) else None


class TransactionalWriter(Protocol):
    """What the exactly-once sink needs from a transactional producer, for one transactional.id."""

    def init(self) -> None:
        """``init_transactions``: bump the epoch, fencing older attempts, and finish (abort) any
        transaction an older attempt left open."""

    def fetch_marker(self, topic: str) -> int | None:
        """The batch id of the last marker committed on ``topic`` (OffsetFetch with require_stable,
        retried while the broker answers UNSTABLE_OFFSET_COMMIT), or None."""

    def begin(self) -> None: ...

    def send(self, record: OutputRecord) -> None:
        """Queue one record in the open transaction (may send in the background)."""

    def send_chunk(self, chunk: OutputChunk) -> None:
        """Queue a chunk's records in the open transaction (optional: without it the records of a
        chunk go through ``send`` one by one)."""

    def send_offsets(self, batch_id: int, topics: Collection[str]) -> None:
        """``send_offsets_to_transaction`` with the marker for ``batch_id`` on each of ``topics``."""

    def commit(self) -> None:
        """Flush everything, then ``commit_transaction``; raises if fenced or if a send failed."""

    def prepare(self) -> str:
        """Batch-atomic mode (KIP-939): flush everything and ``prepare_transaction``; returns the
        prepared state as text, for the driver to complete (optional: the per-task mode never calls it)."""

    def abort(self) -> None: ...

    def close(self) -> None: ...


def write_exactly_once(
    writer: TransactionalWriter,
    batch_id: int,
    records: Iterable[OutputRecord | OutputChunk],
    *,
    prepare: bool = False,
) -> TaskOutcome:
    """Write one task's part of batch ``batch_id`` once, whatever happened to earlier attempts.
    ``prepare`` (batch-atomic mode): the transaction is prepared, not committed, and its state is in
    the outcome; the driver commits it with the rest of the batch."""
    writer.init()
    items = iter(records)
    first = next(items, None)
    if first is None:
        # A task with no rows writes nothing and commits no marker: its replay writes nothing either.
        return TaskOutcome(0, skipped=False)
    committed = writer.fetch_marker(first.topic)
    if committed is not None and committed >= batch_id:
        log.info(
            "batch %d already committed (marker %d on %s): writing nothing", batch_id, committed, first.topic
        )
        return TaskOutcome(0, skipped=True)
    writer.begin()
    count = 0
    topics: set[str] = set()
    try:
        send_chunk = getattr(writer, "send_chunk", None)
        for record in chain((first,), items):
            topics.add(record.topic)
            if type(record) is OutputChunk:
                if send_chunk is not None:
                    send_chunk(record)
                else:
                    for item in _chunk_records(record):
                        writer.send(item)
                count += len(record.values)
                continue
            writer.send(record)
            count += 1
        writer.send_offsets(batch_id, sorted(topics))
        if prepare:
            return TaskOutcome(count, skipped=False, prepared=writer.prepare())
        writer.commit()
    except BaseException:
        try:
            writer.abort()
        except Exception:  # fenced or disconnected: the next init (or the timeout) aborts it
            log.debug("abort after a failed write failed too", exc_info=True)
        raise
    return TaskOutcome(count, skipped=False)


def _chunk_records(chunk: OutputChunk) -> list[OutputRecord]:
    n = len(chunk.values)
    keys = chunk.keys if chunk.keys is not None else [None] * n
    headers = chunk.headers if chunk.headers is not None else [None] * n
    return [OutputRecord(chunk.topic, keys[i], chunk.values[i], headers[i] or ()) for i in range(n)]
