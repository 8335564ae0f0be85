"""Producer: the blocking facade over :class:`AsyncProducer`, for scripts and Spark executors.

An event loop runs in a daemon thread owned by the producer. ``send`` appends to the accumulator from
the caller's thread (no hop to the loop per record, as Java's ``KafkaProducer.send``); everything that
talks to the network runs on the loop and is waited for. Callbacks run on the producer's loop thread:
keep them short and never call blocking producer methods from them.

Spark sink usage (one producer per task attempt; ``transactional.id`` stable per sink partition)::

    producer = Producer({"bootstrap.servers": servers, "transactional.id": f"sink-{query}-{partition}"})
    producer.init_transactions()        # fences the earlier attempt of this task, aborts its transaction
    producer.begin_transaction()
    for row in rows:
        producer.send(topic, row.value, key=row.key)
    producer.send_offsets_to_transaction({(src_topic, p): next_offset}, "sink-group")  # optional
    producer.commit_transaction()       # or abort_transaction() on failure
    producer.close()
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from onceflow.client.metrics import MetricsSnapshot, elapsed_ns
from onceflow.client.producer.batch import RecordFuture, RecordMetadata
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.errors import BufferExhaustedError, ProducerClosedError
from onceflow.client.producer.faults import ClientFaults
from onceflow.client.producer.prepared_txn_state import PreparedTxnState
from onceflow.client.producer.producer import AsyncProducer

try:  # a faster loop where installed
    import uvloop

    _new_loop = uvloop.new_event_loop
except ImportError:  # pragma: no cover - depends on the environment
    _new_loop = asyncio.new_event_loop


class Producer:
    """Blocking producer with futures and callbacks. Same configuration as :class:`AsyncProducer`."""

    def __init__(
        self,
        config: ProducerConfig | Mapping[str, Any] | None = None,
        *,
        faults: ClientFaults | None = None,
        **settings: Any,
    ) -> None:
        self._async = AsyncProducer(config, faults=faults, **settings)
        self.config = self._async.config
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._run_loop, name="onceflow-producer", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._call(self._async.start())
        except BaseException:
            self._stop_loop()
            raise

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro, timeout: float | None = None):
        if self._loop.is_closed():
            coro.close()  # never started: no "coroutine was never awaited" warning
            raise ProducerClosedError(f"{coro.__qualname__.rsplit('.', 1)[-1]}() after close()")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def async_producer(self) -> AsyncProducer:
        return self._async

    # -- sending ------------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        callback: Callable[[RecordMetadata | None, BaseException | None], None] | None = None,
    ) -> RecordFuture:
        """Queue a record. Returns a :class:`RecordFuture` (a :class:`concurrent.futures.Future`:
        ``result(timeout)`` blocks for the metadata); ``callback(metadata, error)`` runs on the producer's thread when the record is acknowledged or
        failed. Blocks only for a new topic's metadata or a full buffer.memory (up to max.block.ms).
        A record that cannot be queued is not raised (see :meth:`AsyncProducer.send`): too large, no
        metadata for its topic or no room in buffer.memory within max.block.ms. Its future holds the
        error, and ``callback`` runs at once, in the caller's thread."""
        producer = self._async
        count = producer._network.partition_counts.get(topic)
        result = None
        if count is not None:
            result = producer._append(topic, value, key, partition, timestamp_ms, headers, count)
        if result is None or type(result) is int:
            self._check_open("send")
            result = self._call(
                producer.send(
                    topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
                )
            )
        if callback is not None:
            result.batch.add_callback(result.index, callback)
        return result

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[list[tuple[str, bytes | None]] | None] | None = None,
    ) -> list[RecordFuture]:
        """Queue many records of one topic in one call: ``send`` without a future per record (see
        :meth:`AsyncProducer.send_many`). Returns one :class:`RecordFuture` per batch used; after
        ``flush()``, ``result()`` on each raises the error of a batch that failed. Blocks only for a
        new topic's metadata or a full buffer.memory (up to max.block.ms); what fails then is not
        raised but returned in the last future, as with :meth:`AsyncProducer.send_many`."""
        producer = self._async
        count = producer._network.partition_counts.get(topic)
        if count is None:
            self._check_open("send_many")
            count = self._call(producer._topic_partitions(topic, partition, producer._block_deadline()))
            if type(count) is not int:
                return [count]  # refused
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        futures: list[RecordFuture] = []
        filling = producer._fill_many(topic, values, keys, partition, count, timestamp, headers, futures)
        for need in filling:
            if need:
                waited = time.perf_counter()
                try:
                    producer._accumulator.memory.wait_sync(need, producer._block_deadline())
                except BufferExhaustedError as exc:
                    filling.close()
                    futures.append(producer._refuse(topic, partition, exc))
                    break
                finally:
                    producer._metrics.bufferpool_wait_time.record(elapsed_ns(waited))
        return futures

    def _check_open(self, what: str) -> None:
        """Before handing work to the producer's loop, which close() stops."""
        if self._closed:
            raise ProducerClosedError(f"{what}() after close()")

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until each record is acknowledged or failed."""
        self._call(self._async.flush(), timeout)

    def partitions_for(self, topic: str) -> list[int]:
        return self._call(self._async.partitions_for(topic))

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self._async.producer_id_and_epoch

    def metrics(self) -> MetricsSnapshot:
        """The producer's metrics now, with Kafka's names (see :meth:`AsyncProducer.metrics`)."""
        return self._async.metrics()

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (up to ``timeout`` seconds), disconnect, and stop the producer's thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._async.close(timeout))
        finally:
            self._stop_loop()

    # -- transactions (see AsyncProducer for the semantics) -----------------------------------------

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Register transactional.id: fences earlier producers with it and aborts what they left open
        (with ``keep_prepared_txn``, a two-phase commit producer keeps a prepared transaction)."""
        self._call(self._async.init_transactions(keep_prepared_txn))

    def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939's first phase: flush and hold the transaction for an external coordinator."""
        return self._call(self._async.prepare_transaction())

    @property
    def prepared_transaction_state(self) -> PreparedTxnState:
        return self._async.prepared_transaction_state

    def complete_transaction(self, prepared_state: PreparedTxnState | str) -> None:
        """KIP-939's second phase: commit if ``prepared_state`` matches the prepared transaction, else abort."""
        self._call(self._async.complete_transaction(prepared_state))

    def begin_transaction(self) -> None:
        self._async.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping, group_metadata) -> None:
        """``offsets``: ``{(topic, partition): next_offset}``; ``group_metadata``: the consumer's
        ``group_metadata()`` or a group id string (like Java's ``new ConsumerGroupMetadata(groupId)``)."""
        self._call(self._async.send_offsets_to_transaction(offsets, group_metadata))

    def commit_transaction(self) -> None:
        self._call(self._async.commit_transaction())

    def abort_transaction(self) -> None:
        self._call(self._async.abort_transaction())
