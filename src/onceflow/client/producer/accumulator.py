"""The record accumulator: per-partition queues of batches, buffer.memory, and which batches are ready.

``append`` may be called from any thread (the sync facade appends from the caller's thread, as Java's
``KafkaProducer.send`` does); everything else runs on the sender's event loop. A batch is ready when it
is full, has waited ``linger.ms``, or a flush/close wants everything out. ``buffer.memory`` bounds the
bytes of unacknowledged batches: a new batch reserves ``batch.size`` (or the record's size if larger)
and gives it back when it completes; a sender blocked on a full buffer waits up to ``max.block.ms``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from onceflow.client.producer.batch import BatchFuture, ProducerBatch, RecordFuture
from onceflow.client.producer.errors import BufferExhaustedError
from onceflow.protocol.record_codec import decode_batches

_NO_HEADERS: list = []  # shared: the batch builder only reads it
_NO_SIZE_LIMIT = (1 << 31) - 1


class BufferMemory:
    """Counts reserved bytes against ``buffer.memory``; threads and coroutines can wait for room."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._cond = threading.Condition()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.waiting = 0  # how many senders wait: the accumulator then drains everything

    def try_reserve(self, size: int) -> bool:
        with self._cond:
            # A record larger than the whole buffer may go alone, as Kafka lets it when the pool is empty.
            if self.used + size <= self.total or self.used == 0:
                self.used += size
                return True
            return False

    def release(self, size: int) -> None:
        with self._cond:
            self.used -= size
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def wait_sync(self, size: int, deadline: float) -> None:
        with self._cond:
            self.waiting += 1
            try:
                while self.used + size > self.total and self.used != 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise _exhausted(size, self.total)
                    self._cond.wait(remaining)
            finally:
                self.waiting -= 1

    async def wait_async(self, size: int, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self.used + size <= self.total or self.used == 0:
                    return
                event = asyncio.Event()
                self._async_waiters.append((loop, event))
                self.waiting += 1
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _exhausted(size, self.total)
                try:
                    async with asyncio.timeout(remaining):  # not wait_for: it can lose a cancel
                        await event.wait()
                except TimeoutError:
                    raise _exhausted(size, self.total)
            finally:
                with self._cond:
                    self.waiting -= 1


def _exhausted(size: int, total: int) -> BufferExhaustedError:
    return BufferExhaustedError(
        f"could not reserve {size} bytes of buffer.memory ({total}) within max.block.ms: records are sent "
        "faster than the broker acknowledges them; raise buffer.memory or max.block.ms, or send slower"
    )


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        transactional: bool,
        on_new_batch=None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000.0
        self.memory = BufferMemory(buffer_memory)
        self.transactional = int(transactional)
        self._queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self._lock = threading.Lock()
        self.batches_created = 0  # send() yields to the sender when this moves
        self.flushing = 0  # > 0 while flush()/close() wants every batch out now
        self._on_new_batch = on_new_batch  # called (outside the lock) when a batch starts or fills

    # -- any thread -------------------------------------------------------------------------------

    def try_append(
        self, topic: str, partition: int, timestamp: int, key, value, headers
    ) -> RecordFuture | int:
        """Append a record; its future, or (when a new batch needs memory that is not free) the byte
        count to wait for with ``memory.wait_*`` before calling again."""
        tp = (topic, partition)
        wake = False
        with self._lock:
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            if queue:
                last = queue[-1]
                builder = last.builder
                if not last.full and builder is not None:
                    timestamps = last.timestamps
                    index = len(timestamps)
                    if builder.append(index, timestamp, key, value, headers) is not None:
                        timestamps.append(timestamp)
                        return RecordFuture(last, index)
                    last.full = True
                    wake = True  # it just filled: ready to send
            need = max(self.batch_size, serialized_size_upper_bound(key, value, headers))
            if not self.memory.try_reserve(need):
                if wake and self._on_new_batch is not None:
                    self._on_new_batch()
                return need
            builder = DefaultRecordBatchBuilder(2, 0, self.transactional, -1, -1, -1, self.batch_size)
            batch = ProducerBatch(topic, partition, builder, time.monotonic(), need)
            index = batch.try_append(timestamp, key, value, headers)
            queue.append(batch)
            self.batches_created += 1
        if self._on_new_batch is not None:
            self._on_new_batch()
        return RecordFuture(batch, index)

    def append_many(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        keys,
        values,
        headers,
        indices,
        start: int,
        touched: list[RecordFuture],
    ) -> tuple[int, int]:
        """Append the records ``indices[start:]`` (positions in ``keys``/``values``/``headers``; keys
        and headers may be None) to one partition, in order, filling batch after batch.

        For each batch that received records, one :class:`RecordFuture` (of its last record) goes
        to ``touched``. Returns ``(position reached in indices, 0)`` when all went in, or ``(position,
        bytes)`` when a new batch needs memory that is not free: wait for it, then call again from
        there. The lock is taken per batch, so the sender can take full batches meanwhile.
        """
        tp = (topic, partition)
        total = len(indices)
        pos = start
        while pos < total:
            wake = False
            with self._lock:
                queue = self._queues.get(tp)
                if queue is None:
                    queue = self._queues[tp] = deque()
                last = queue[-1] if queue else None
                if last is None or last.full or last.builder is None:
                    j = indices[pos]
                    key = keys[j] if keys is not None else None
                    record_headers = headers[j] if headers is not None and headers[j] else _NO_HEADERS
                    need = max(self.batch_size, serialized_size_upper_bound(key, values[j], record_headers))
                    if not self.memory.try_reserve(need):
                        return pos, need
                    builder = DefaultRecordBatchBuilder(2, 0, self.transactional, -1, -1, -1, self.batch_size)
                    last = ProducerBatch(topic, partition, builder, time.monotonic(), need)
                    queue.append(last)
                    self.batches_created += 1
                    wake = True
                append = last.builder.append
                timestamps = last.timestamps
                first = index = len(timestamps)
                while pos < total:
                    j = indices[pos]
                    if (
                        append(
                            index,
                            timestamp,
                            keys[j] if keys is not None else None,
                            values[j],
                            headers[j] if headers is not None and headers[j] else _NO_HEADERS,
                        )
                        is None
                    ):
                        last.full = True
                        wake = True  # it just filled: ready to send
                        break
                    index += 1
                    pos += 1
                if index > first:
                    timestamps.extend([timestamp] * (index - first))
                    touched.append(BatchFuture(last, index - 1))
            if wake and self._on_new_batch is not None:
                self._on_new_batch()
        return pos, 0

    # -- sender's loop ----------------------------------------------------------------------------

    def ready(self, now: float, sendable) -> tuple[list[tuple[str, int]], float | None]:
        """Partitions whose first batch should go now (and pass ``sendable(tp, batch)``), and the
        seconds until the next linger or retry deadline (None: nothing queued)."""
        ready: list[tuple[str, int]] = []
        next_delay: float | None = None
        drain_all = self.flushing > 0 or self.memory.waiting > 0
        with self._lock:
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                first = queue[0]
                if first.retry_at > now:
                    delay = first.retry_at - now
                elif drain_all or first.full or len(queue) > 1 or first.encoded is not None:
                    delay = 0.0
                else:
                    delay = first.created + self.linger_s - now
                if delay <= 0:
                    if sendable(tp, first):
                        ready.append(tp)
                elif next_delay is None or delay < next_delay:
                    next_delay = delay
        return ready, next_delay

    def pop_first(self, tp: tuple[str, int]) -> ProducerBatch | None:
        with self._lock:
            queue = self._queues.get(tp)
            if not queue:
                return None
            batch = queue.popleft()
            batch.full = True  # closed for appends from now on
            return batch

    def requeue(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> None:
        """Put batches back at the front in sequence order (a retry keeps its place in the partition),
        merged with the sequenced batches already back there (the parts of a split batch, then the
        retries behind them); batches without a sequence keep the order given."""
        with self._lock:
            queue = self._queues.setdefault(tp, deque())
            returned = list(batches)
            while queue and queue[0].base_sequence >= 0:
                returned.append(queue.popleft())
            # A stable ascending sort walked backwards: equal sequences (-1) keep their order.
            for batch in reversed(sorted(returned, key=lambda b: b.base_sequence)):
                queue.appendleft(batch)

    def split(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """Halve a batch the broker refused as too large: two batches with its records in order (no
        producer fields yet), which complete it when both have (see ``ProducerBatch.split_into``).
        Its buffer.memory reservation moves to the second part."""
        records = [r for decoded in decode_batches(batch.encoded) for r in decoded.records]
        half = len(records) // 2
        parts: list[tuple[int, ProducerBatch]] = []
        for first, chunk in ((0, records[:half]), (half, records[half:])):
            builder = DefaultRecordBatchBuilder(2, 0, self.transactional, -1, -1, -1, _NO_SIZE_LIMIT)
            for i, record in enumerate(chunk):
                builder.append(i, record.timestamp, record.key, record.value, record.headers)
            part = ProducerBatch(batch.topic, batch.partition, builder, batch.created, 0)
            part.timestamps = batch.timestamps[first : first + len(chunk)]
            part.full = True
            parts.append((first, part))
        parts[-1][1].reserved, batch.reserved = batch.reserved, 0
        batch.split_into(parts)
        return [part for _first, part in parts]

    def peek(self, tp: tuple[str, int]) -> ProducerBatch | None:
        queue = self._queues.get(tp)
        return queue[0] if queue else None

    def several(self, tp: tuple[str, int]) -> bool:
        queue = self._queues.get(tp)
        return queue is not None and len(queue) > 1

    def queued(self, tp: tuple[str, int]) -> list[ProducerBatch]:
        with self._lock:
            return list(self._queues.get(tp, ()))

    def partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return [tp for tp, q in self._queues.items() if q]

    def has_queued(self) -> bool:
        with self._lock:
            return any(self._queues.values())

    def expire(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery.timeout.ms``."""
        expired = []
        with self._lock:
            for queue in self._queues.values():
                while queue and now - queue[0].created >= delivery_timeout_s:
                    expired.append(queue.popleft())
        return expired

    def oldest_created(self) -> float | None:
        """When the oldest queued batch was created (None: nothing queued): a queue's first batch is
        its oldest (retries go back to the front in order)."""
        with self._lock:
            return min((q[0].created for q in self._queues.values() if q), default=None)

    def drain_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (abort, close): the caller completes them with an error."""
        with self._lock:
            batches = [b for q in self._queues.values() for b in q]
            for queue in self._queues.values():
                queue.clear()
        return batches


_RECORD_BATCH_OVERHEAD = 61  # a magic-2 batch header
_MAX_RECORD_OVERHEAD = 21  # a record's length, attributes, timestamp and offset deltas, header count
# A record without headers whose key and value lengths add up to at most (limit - this) is within the
# limit without measuring it (this adds the two length varints, at most 5 bytes each).
RECORD_SIZE_SLACK = _RECORD_BATCH_OVERHEAD + _MAX_RECORD_OVERHEAD + 10


def _varint_size(n: int) -> int:
    zigzag = (n << 1) ^ (n >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def serialized_size_upper_bound(key, value, headers) -> int:
    """The most bytes a batch holding just this record can take, uncompressed (Kafka's
    ``estimateSizeInBytesUpperBound``): what ``max.request.size`` and ``buffer.memory`` are checked
    against when a record is sent."""
    key_len = len(key) if key is not None else -1
    value_len = len(value) if value is not None else -1
    size = _RECORD_BATCH_OVERHEAD + _MAX_RECORD_OVERHEAD
    size += _varint_size(key_len) + max(key_len, 0) + _varint_size(value_len) + max(value_len, 0)
    for name, val in headers or ():
        name_len = len(name.encode() if isinstance(name, str) else name)
        val_len = len(val) if val is not None else -1
        size += _varint_size(name_len) + name_len + _varint_size(val_len) + max(val_len, 0)
    return size
