"""One batch of records for one partition, and the per-record handles derived from it.

Records are appended straight into aiokafka's Cython ``DefaultRecordBatchBuilder`` as they are sent,
so ``send()`` costs one C call, and a batch is encoded once when it is first drained. A batch has one
completion (offset or error); each record's :class:`RecordFuture` is a small view of it (the batch and
an index), so there is no future per record. Retries resend the same bytes; only a KIP-360 epoch bump
rewrites the producer id, epoch and base sequence in the header (and the CRC).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import crc32c
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from onceflow.protocol.compression import CompressionType, compress
from onceflow.protocol.records import BATCH_HEADER_SIZE, COMPRESSION_MASK, LOG_OVERHEAD

log = logging.getLogger(__name__)

# Positions in the magic-2 batch header.
_BATCH_LENGTH_POS = 8
_CRC_POS = 17
_ATTRIBUTES_POS = 21  # the CRC covers the batch from here on
_PRODUCER_POS = 43  # producer id (int64), epoch (int16), base sequence (int32)
_PRODUCER_FIELDS = struct.Struct(">qhi")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_completion_lock = threading.Lock()  # guards lazy creation of waiters against completion


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written. ``offset`` is -1 with acks=0."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
    """Records for one partition, built as they arrive; sent, maybe retried, completed once."""

    __slots__ = (
        "topic",
        "partition",
        "builder",
        "created",
        "timestamps",
        "reserved",
        "full",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "encoded",
        "attempts",
        "retry_at",
        "done",
        "base_offset",
        "log_append_time",
        "error",
        "_callbacks",
        "_future",
        "_event",
        "parts",
        "parent",
    )

    def __init__(
        self, topic: str, partition: int, builder: DefaultRecordBatchBuilder, created: float, reserved: int
    ):
        self.topic = topic
        self.partition = partition
        self.builder: DefaultRecordBatchBuilder | None = builder
        self.created = created  # monotonic seconds, for linger.ms and delivery.timeout.ms
        self.timestamps: list[int] = []
        self.reserved = reserved  # bytes of buffer.memory held until completion
        self.full = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.encoded: bytearray | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._callbacks: list[tuple[int, Callable]] | None = None
        self._future: asyncio.Future | None = None
        self._event: threading.Event | None = None
        # Set when the broker refused the batch as too large and its records went out as smaller
        # batches: [(index of the part's first record here, part)]; each part knows its parent.
        self.parts: list[tuple[int, ProducerBatch]] | None = None
        self.parent: ProducerBatch | None = None

    @property
    def record_count(self) -> int:
        return len(self.timestamps)

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.record_count - 1) & 0x7FFFFFFF

    def try_append(self, timestamp: int, key, value, headers) -> int | None:
        """Add a record; its index, or None when the batch is full (the first record always fits)."""
        meta = self.builder.append(len(self.timestamps), timestamp, key, value, headers)
        if meta is None:
            self.full = True
            return None
        self.timestamps.append(timestamp)
        return len(self.timestamps) - 1

    def size(self) -> int:
        if self.builder is not None:
            return self.builder.size()
        return len(self.encoded) if self.encoded is not None else 0

    def encode(self, compression: int) -> bytearray:
        """The batch's bytes, built on first use with the producer fields set so far."""
        if self.encoded is None:
            builder, self.builder = self.builder, None
            builder.set_producer_state(self.producer_id, self.producer_epoch, self.base_sequence)
            data = builder.build()
            if compression != CompressionType.NONE:
                data = _compressed(data, compression)
            self.encoded = data
        return self.encoded

    def set_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """Assign (or, after an epoch bump, rewrite) the producer fields, patching built bytes in place."""
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, epoch, base_sequence
        if self.encoded is not None:
            _PRODUCER_FIELDS.pack_into(self.encoded, _PRODUCER_POS, producer_id, epoch, base_sequence)
            _UINT32.pack_into(
                self.encoded, _CRC_POS, crc32c.crc32c(memoryview(self.encoded)[_ATTRIBUTES_POS:])
            )

    # -- completion ------------------------------------------------------------------------------

    def complete(
        self, base_offset: int, log_append_time: int = -1, error: BaseException | None = None
    ) -> None:
        """Record the outcome once (later calls are ignored) and wake every waiter and callback."""
        with _completion_lock:
            if self.done:
                return
            self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
            self.done = True
            event = self._event
        # The futures of its records may live long after; the bytes must not live with them.
        self.builder = None
        self.encoded = None
        if event is not None:
            event.set()
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)
        if self._callbacks:
            for index, callback in self._callbacks:
                _run_callback(callback, *self.outcome(index))
        if self.parent is not None:
            self.parent._part_completed()

    # -- split (MESSAGE_TOO_LARGE) ---------------------------------------------------------------

    def split_into(self, parts: list[tuple[int, ProducerBatch]]) -> None:
        """This batch goes out as ``parts`` instead: it completes once they all have, and each of
        its records takes the outcome of the part that holds it."""
        self.parts = parts
        self.encoded = None
        for _first, part in parts:
            part.parent = self

    def _part_completed(self) -> None:
        parts = self.parts
        if parts is None or not all(part.done for _first, part in parts):
            return
        # The batch-level error (what a send_many future reports) is the first failed part's.
        error = next((part.error for _first, part in parts if part.error is not None), None)
        self.complete(-1, -1, error)

    def _part_of(self, index: int) -> tuple[ProducerBatch, int]:
        for first, part in reversed(self.parts):
            if index >= first:
                return part, index - first
        raise IndexError(index)

    def metadata(self, index: int) -> RecordMetadata:
        if self.parts is not None:
            part, local = self._part_of(index)
            return part.metadata(local)
        timestamp = self.log_append_time if self.log_append_time >= 0 else self.timestamps[index]
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        return RecordMetadata(self.topic, self.partition, offset, timestamp)

    def outcome(self, index: int) -> tuple[RecordMetadata | None, BaseException | None]:
        if self.parts is not None:
            part, local = self._part_of(index)
            return part.outcome(local)
        if self.error is not None:
            return None, self.error
        return self.metadata(index), None

    def add_callback(self, index: int, callback: Callable) -> None:
        with _completion_lock:
            if not self.done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((index, callback))
                return
        callback(*self.outcome(index))

    def wait(self, timeout: float | None) -> bool:
        """Block the calling (non-event-loop) thread until done; False on timeout."""
        with _completion_lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def async_future(self) -> asyncio.Future:
        """A future on the running loop that resolves (to None) when the batch completes."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self.done:
                self._future.set_result(None)
        return self._future


class RecordFuture:
    """The outcome of one ``send()``, with the interface of :class:`concurrent.futures.Future`:
    ``result(timeout)`` waits until the record is acknowledged (or failed) and returns its
    :class:`RecordMetadata` or raises its error; ``exception(timeout)``, ``done()`` and
    ``add_done_callback(fn)`` (``fn(future)``) are as there. A queued record cannot be taken back (nor
    can Kafka's): ``cancel()`` returns False. Await it in asyncio code: on a thread whose event loop is
    running, ``result()`` of a record still in flight raises instead of blocking that loop."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def done(self) -> bool:
        return self.batch.done

    def running(self) -> bool:
        return not self.batch.done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def __await__(self):
        if not self.batch.done:
            yield from self.batch.async_future().__await__()
        return self._outcome()

    def _wait(self, timeout: float | None) -> None:
        if self.batch.done:
            return
        if asyncio._get_running_loop() is not None:
            raise asyncio.InvalidStateError(
                "the record is not acknowledged yet, and waiting here would block this thread's event "
                "loop: await the future instead"
            )
        if not self.batch.wait(timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout}s")

    def _outcome(self) -> RecordMetadata:
        """The metadata of the completed send; raises its error."""
        batch = self.batch
        if batch.parts is not None:
            metadata, error = batch.outcome(self.index)
            if error is not None:
                raise error
            return metadata
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self.index)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: as long as it takes) for the acknowledgement and
        return the record's metadata; raises the send's error, or TimeoutError."""
        self._wait(timeout)
        return self._outcome()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """``result(timeout)``, under kafka-python's name."""
        return self.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like ``result`` and return the send's error, or None if it was acknowledged."""
        self._wait(timeout)
        try:
            self._outcome()
        except BaseException as error:
            return error
        return None

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        """``fn(future)`` once the record is acknowledged or failed: on the producer's thread, or at once
        in the caller's if it already is (as :class:`concurrent.futures.Future` does)."""
        self.batch.add_callback(self.index, lambda _metadata, _error: fn(self))


class BatchFuture(RecordFuture):
    """``send_many``'s handle on every record it put in one batch (its index is the last record's):
    the batch's error if any record of it failed (after a split, any part), else the last record's
    metadata."""

    __slots__ = ()

    def _outcome(self) -> RecordMetadata:
        batch = self.batch
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self.index)


def failed_future(topic: str, partition: int, error: BaseException) -> RecordFuture:
    """The future of a record refused before it was queued (Kafka's ``FutureFailure``): already done,
    holding ``error``; callbacks added to it run at once, in the caller's thread."""
    batch = ProducerBatch(topic, partition, None, time.monotonic(), 0)
    batch.complete(-1, -1, error)
    return RecordFuture(batch, 0)


def _compressed(batch: bytearray, codec: int) -> bytearray:
    """Compress the records section of an uncompressed batch and fix the header (length, codec, CRC)."""
    out = bytearray(batch[:BATCH_HEADER_SIZE])
    out += compress(codec, memoryview(batch)[BATCH_HEADER_SIZE:])
    _INT32.pack_into(out, _BATCH_LENGTH_POS, len(out) - LOG_OVERHEAD)
    (attributes,) = _INT16.unpack_from(out, _ATTRIBUTES_POS)
    _INT16.pack_into(out, _ATTRIBUTES_POS, (attributes & ~COMPRESSION_MASK) | codec)
    _UINT32.pack_into(out, _CRC_POS, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_POS:]))
    return out


def _run_callback(callback: Callable, metadata, error) -> None:
    """A user's callback that raises is logged, as Kafka's producer does: the sender completes the
    other batches of the answer and goes on (an exception escaping here stranded them in flight for
    ever, and a flush waited on them)."""
    try:
        callback(metadata, error)
    except Exception:
        log.exception("a producer callback raised; the producer goes on")
