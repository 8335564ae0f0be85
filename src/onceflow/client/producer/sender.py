"""The sender: drains ready batches into Produce requests, keeps sequence numbers, retries in order.

One task on the producer's event loop (requests are written and answered through
:mod:`produce_dispatch`, without a task each). Per broker it keeps at most
``max.in.flight.requests.per.connection`` Produce requests in flight, each holding one batch per
partition (as Kafka). With idempotence every batch gets its partition's next sequence number when it is
first drained and keeps it on every retry, so the broker can recognise a retry of a batch it already
wrote (it remembers the last 5 per partition) and answer it with the original offsets.

Ordering with up to 5 in flight: when a batch fails retriably, the partition stops sending until its
other in-flight batches have answered, then every unacknowledged batch goes back to the front of the
queue in sequence order and is resent. OUT_OF_ORDER_SEQUENCE_NUMBER on a batch that has earlier
unacknowledged batches is a consequence of their failure and is retried the same way.

A partition's first batch of a producer goes alone: a broker accepts any sequence from a producer it
does not know (KIP-360, for state removed by retention), so a later batch that got there first would
be written ahead of it. Once the broker has acknowledged a batch of this producer id, it refuses gaps
and up to ``max.in.flight`` batches go at once. (TCP keeps requests in order on one connection, so
Kafka's producer has no such rule; ours also holds under reordered or lost requests, which the
client faults make.)

KIP-360: OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID on the partition's *earliest*
unacknowledged batch means the broker lost track of the sequence (a gap it cannot fill, or state removed
by retention). An idempotent producer then bumps its epoch and rewrites the sequences of that
partition's unacknowledged batches from 0; other partitions move to the new epoch, from sequence 0,
when their in-flight batches are done. A transactional producer instead fails the transaction
(abortable), and the epoch is bumped with InitProducerId after abort_transaction().

MESSAGE_TOO_LARGE on a batch of several records: the batch is split in two and both halves are
resent (again, if still too large), as Kafka's producer does; see :meth:`Sender._split`. A batch of
one record fails with :class:`RecordTooLargeError` (Kafka's RecordTooLargeException).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from onceflow.client.producer.accumulator import RecordAccumulator
from onceflow.client.producer.batch import ProducerBatch
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.errors import (
    FATAL_CODES,
    DeliveryTimeoutError,
    RecordTooLargeError,
    TransactionAbortableError,
    fatal_error_for,
)
from onceflow.client.producer.faults import ClientFaults
from onceflow.client.producer.metrics import ProducerMetrics
from onceflow.client.producer.network import ProducerNetwork
from onceflow.client.producer.produce_dispatch import ProduceDispatcher
from onceflow.client.producer.transaction_manager import TransactionManager, TxnEvent, TxnState
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.records import MAX_PRODUCER_EPOCH

log = logging.getLogger(__name__)

_SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
_METADATA_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


class PartitionSequences:
    """Idempotence bookkeeping of one partition."""

    __slots__ = ("epoch", "next_sequence", "inflight", "window", "retry", "bump", "known_to_broker")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch  # the epoch this partition's sequences belong to
        self.next_sequence = 0
        self.inflight: list[ProducerBatch] = []  # sent, unanswered, in sequence order
        # Sent batches from the earliest unacknowledged one on (acknowledged ones behind it stay).
        # At most max.in.flight long: then the broker's 5-batch cache still holds every batch we may
        # have to retry, even when a response in the middle was lost.
        self.window: deque[ProducerBatch] = deque()
        self.retry: list[ProducerBatch] = []  # to resend once `inflight` is empty
        self.bump = False  # KIP-360: rewrite sequences under a new epoch once `inflight` is empty
        # The producer id whose batch the broker acknowledged here (-1: none yet): until then the
        # broker would take any sequence, so one batch at a time.
        self.known_to_broker = -1


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        network: ProducerNetwork,
        txn: TransactionManager,
        faults: ClientFaults | None = None,
        metrics: ProducerMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else ProducerMetrics(config.client_id)
        self.accumulator = accumulator
        self.network = network
        self.txn = txn
        self.faults = faults
        self.idempotent = bool(config.enable_idempotence)
        self.max_in_flight = config.max_in_flight_requests_per_connection
        self.max_request_size = config.max_request_size
        self.delivery_timeout_s = config.delivery_timeout_ms / 1000.0
        self.request_timeout_s = config.request_timeout_ms / 1000.0
        self.retry_backoff_s = config.retry_backoff_ms / 1000.0
        self.dispatcher = ProduceDispatcher(config, txn, faults, self._answered, self.metrics)
        self.metadata_max_age_s = config.metadata_max_age_ms / 1000.0
        self.partitions: dict[tuple[str, int], PartitionSequences] = {}
        self._node_inflight: dict[int, int] = {}
        self._requests_sent = 0
        self._woken = False  # wakeup() since the loop last looked
        self._wake_waiter: asyncio.Future | None = None  # what the idle loop awaits
        self._idle_waiters: list[asyncio.Future] = []
        self._metadata_task: asyncio.Task | None = None
        self._add_partitions_task: asyncio.Task | None = None
        self._closing = False
        self._task: asyncio.Task | None = None
        self.epoch_bumps = 0  # for tests and logs
        self.splits = 0  # batches split after MESSAGE_TOO_LARGE

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="onceflow-producer-sender")

    def wakeup(self) -> None:
        self._woken = True
        waiter = self._wake_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def stop(self) -> None:
        self._closing = True
        self.wakeup()
        if self._task is not None:
            await self._task  # returns once idle: no request is in flight after this
        for task in (self._metadata_task, self._add_partitions_task):
            if task is not None and not task.done():
                task.cancel()

    def idle(self) -> bool:
        return (
            not self._node_inflight_total()
            and not self.accumulator.has_queued()
            and not any(s.retry for s in self.partitions.values())
        )

    async def wait_idle(self) -> None:
        """Until nothing is queued or in flight (flush)."""
        self.accumulator.flushing += 1
        try:
            while not self.idle():
                future = asyncio.get_running_loop().create_future()
                self._idle_waiters.append(future)
                self.wakeup()
                await future
        finally:
            self.accumulator.flushing -= 1

    def _node_inflight_total(self) -> int:
        return sum(self._node_inflight.values())

    def requests_in_flight(self) -> int:
        return self._node_inflight_total()

    # -- the loop -----------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self._woken = False
            try:
                delay = await self._run_once()
            except Exception:
                # As Kafka's Sender: an unexpected error in one pass is logged and the loop goes on.
                # Ending here would leave every batch in flight or queued unanswered, and each flush
                # waiting for ever.
                log.exception("unexpected error in the producer's sender; it goes on")
                delay = self.retry_backoff_s
            if self.idle():
                waiters, self._idle_waiters = self._idle_waiters, []
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
                if self._closing:
                    return
            await self._until_woken(delay)

    async def _run_once(self) -> float | None:
        """One pass: expire, refresh, send what is ready; the seconds until the next pass is due."""
        now = time.monotonic()
        self._expire(now)
        if now - self.network.last_refresh > self.metadata_max_age_s:
            self._request_metadata()  # metadata.max.age.ms: notice leader moves without errors
        if self.txn.is_transactional:
            if self.txn.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
                self.fail_queued(self._txn_error())
            self._maybe_add_partitions()
        delay = await self._send_ready(now)
        expiry = self._next_expiry(now)
        if expiry is not None and (delay is None or expiry < delay):
            delay = expiry
        return delay

    async def _until_woken(self, delay: float | None) -> None:
        """Until :meth:`wakeup` or ``delay`` seconds (None: no limit). The loop waits once per
        request answered, so this is a bare future and timer: ``wait_for`` on an Event made a task
        each time."""
        if self._woken:
            return
        loop = asyncio.get_running_loop()
        waiter = self._wake_waiter = loop.create_future()
        timer = loop.call_later(delay, _resolve, waiter) if delay is not None else None
        try:
            await waiter
        finally:
            self._wake_waiter = None
            if timer is not None:
                timer.cancel()

    async def _send_ready(self, now: float) -> float | None:
        ready, delay = self.accumulator.ready(now, self._sendable)
        by_node: dict[int, list[tuple[str, int]]] = {}
        missing_leader = False
        for tp in ready:
            node = self.network.leaders.get(tp)
            if node is None:
                missing_leader = True
                continue
            by_node.setdefault(node, []).append(tp)
        if missing_leader:
            self._request_metadata()
            delay = self.retry_backoff_s if delay is None else min(delay, self.retry_backoff_s)
        for node, tps in by_node.items():
            conn = self.network.ready_connection(node)
            if conn is None:
                try:
                    conn = await self.network.connection(node)
                except KafkaError as exc:
                    log.warning("cannot reach broker %d: %s", node, exc)
                    self._request_metadata()
                    delay = self.retry_backoff_s if delay is None else min(delay, self.retry_backoff_s)
                    continue
            # Each request carries the first batch of each partition, as many as fit in
            # max.request.size (the first always goes); repeat while capacity lasts.
            while tps and self._node_inflight.get(node, 0) < self.max_in_flight:
                batches = []
                sizes = []
                room = self.max_request_size
                for tp in tps:
                    head = self.accumulator.peek(tp)
                    if head is None or not self._sendable(tp, head):
                        continue
                    size = head.size()
                    if batches and size > room:
                        continue  # the next request takes it
                    batch = self.accumulator.pop_first(tp)
                    if batch is not None:
                        self._prepare(tp, batch)
                        batches.append(batch)
                        sizes.append(size)
                        room -= size
                if not batches:
                    break
                self._node_inflight[node] = self._node_inflight.get(node, 0) + 1
                self._requests_sent += 1
                request = self.dispatcher.request_for(conn, batches)
                self.metrics.request_sent(batches, sizes, now)
                self.dispatcher.send(node, conn, request, batches, self._requests_sent)
                tps = [tp for tp in tps if self._has_ready_head(tp, now)]
        return delay

    def _has_ready_head(self, tp: tuple[str, int], now: float) -> bool:
        head = self.accumulator.peek(tp)
        if head is None:
            return False
        return head.retry_at <= now and (
            head.full
            or head.encoded is not None
            or self.accumulator.flushing > 0
            or self.accumulator.several(tp)
        )

    def _sendable(self, tp: tuple[str, int], batch: ProducerBatch) -> bool:
        if self.txn.is_transactional:
            if self.txn.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
                return False
            if not self.txn.is_partition_added(tp):
                return False
        if self.idempotent:
            seq = self.partitions.get(tp)
            if seq is not None:
                if seq.retry or seq.bump:
                    return False  # resolving: wait for the in-flight batches to answer
                if batch.base_sequence >= 0:  # a retry (or a split half): already in the window
                    # Only the first max.in.flight of the window may go: then, whatever is written,
                    # the earliest unacknowledged batch stays among the last 5 the broker remembers,
                    # and its retry is recognised. A split makes the window one longer for a while.
                    return len(seq.inflight) < self.max_in_flight and _within(
                        seq.window, batch, self.max_in_flight
                    )
                if len(seq.window) >= self.max_in_flight:
                    return False
                if seq.window and seq.known_to_broker != self.txn.producer_id:
                    return False  # the first batch goes alone (see the module docstring)
        return True

    def _prepare(self, tp: tuple[str, int], batch: ProducerBatch) -> None:
        """Give a batch its producer id, epoch and sequence on first drain (retries keep theirs)."""
        batch.attempts += 1
        if not self.idempotent:
            return
        seq = self.partitions.get(tp)
        if seq is None:
            seq = self.partitions[tp] = PartitionSequences(self.txn.producer_epoch)
        if batch.base_sequence < 0:
            if not seq.window and seq.epoch != self.txn.producer_epoch:
                seq.epoch, seq.next_sequence = self.txn.producer_epoch, 0  # adopt a bumped epoch
            batch.set_producer_state(self.txn.producer_id, seq.epoch, seq.next_sequence)
            seq.next_sequence = (seq.next_sequence + batch.record_count) & 0x7FFFFFFF
            seq.window.append(batch)
        seq.inflight.append(batch)

    def _answered(self, node: int, batches: list[ProducerBatch], outcome) -> None:
        """Settle one request's batches from its outcome (see :mod:`produce_dispatch`): partition
        results, None (acks=0) or an error."""
        self._node_inflight[node] -= 1
        try:
            if isinstance(outcome, BaseException):
                # The request failed as a whole: the connection was lost, or the request timed out,
                # which closed it. Kafka's NetworkClient asks for a metadata update on every
                # disconnect, a timeout included (the leader may have moved), whatever becomes of the
                # batches; a partition's REQUEST_TIMED_OUT in an answer keeps the connection and does not.
                self._request_metadata()
                code = getattr(outcome, "code", ErrorCode.NETWORK_EXCEPTION)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    code = ErrorCode.NETWORK_EXCEPTION
                for batch in batches:
                    self._failed(batch, code, str(outcome))
            elif outcome is None:  # acks=0
                for batch in batches:
                    self._succeeded(batch, -1, -1)
            else:
                by_tp = {(p.topic, p.partition): p for p in outcome}
                for batch in batches:
                    p = by_tp.get((batch.topic, batch.partition))
                    if p is None:
                        self._failed(
                            batch, ErrorCode.NETWORK_EXCEPTION, "partition missing from the response"
                        )
                    elif p.error_code == ErrorCode.NONE:
                        self._succeeded(batch, p.base_offset, p.log_append_time_ms)
                    elif p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                        self._succeeded(batch, -1, -1)  # written before; Kafka reports success without offset
                    else:
                        self._failed(batch, ErrorCode(p.error_code), p.error_message or "")
        finally:
            self.wakeup()

    # -- outcomes -----------------------------------------------------------------------------------

    def _succeeded(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        seq = self.partitions.get((batch.topic, batch.partition))
        if seq is not None and batch in seq.inflight:
            seq.inflight.remove(batch)
            seq.known_to_broker = batch.producer_id
        self._complete(batch, base_offset, log_append_time, None)
        if seq is not None:
            _trim(seq.window)
        if seq is not None and not seq.inflight:
            self._resolve((batch.topic, batch.partition), seq)

    def _failed(self, batch: ProducerBatch, code: ErrorCode, message: str) -> None:
        tp = (batch.topic, batch.partition)
        seq = self.partitions.get(tp)
        earliest = seq is not None and seq.window and seq.window[0] is batch
        if seq is not None and batch in seq.inflight:
            seq.inflight.remove(batch)
        what = f"produce to {tp[0]}-{tp[1]} (sequence {batch.base_sequence}, attempt {batch.attempts})"
        expired = time.monotonic() - batch.created >= self.delivery_timeout_s
        if (
            code == ErrorCode.MESSAGE_TOO_LARGE
            and batch.record_count > 1
            and batch.encoded is not None  # not completed meanwhile (abort, close)
            and not expired
        ):
            self._split(tp, seq, batch, what)
        elif code in FATAL_CODES and (self.txn.is_transactional or code != ErrorCode.INVALID_PRODUCER_EPOCH):
            error = fatal_error_for(code, what)
            self._complete(batch, -1, -1, error)
            if self.txn.is_transactional:
                self._txn_fail(TxnEvent.FAIL_FATAL, error)
        elif self.idempotent and code in _SEQUENCE_ERRORS and earliest and not expired:
            log.warning("%s: %s on the earliest unacknowledged batch", what, code.name)
            if self.txn.is_transactional:
                error = TransactionAbortableError(f"{what}: {code.name}; abort the transaction")
                self._complete(batch, -1, -1, error)
                self.txn.epoch_bump_required = True
                self._txn_fail(TxnEvent.FAIL_ABORTABLE, error)
            else:
                seq.bump = True
                seq.retry.append(batch)
                self.metrics.retried(batch, time.monotonic())
        elif (
            (code.retriable or code in _SEQUENCE_ERRORS)
            and batch.attempts <= self.config.retries
            and not expired
        ):
            log.debug("%s: %s, will retry", what, code.name)
            self.metrics.retried(batch, time.monotonic())
            if code in _METADATA_ERRORS:
                self._request_metadata()
            batch.retry_at = time.monotonic() + self.retry_backoff_s
            if seq is not None:
                seq.retry.append(batch)
            else:
                self.accumulator.requeue(tp, [batch])
        else:
            if expired:
                error = DeliveryTimeoutError(f"{what}: delivery.timeout.ms passed")
            elif code == ErrorCode.MESSAGE_TOO_LARGE:
                error = _too_large(what, batch, message)
            else:
                error = KafkaError(f"{what}: {code.name}" + (f" ({message})" if message else ""), code)
            self._complete(batch, -1, -1, error)
            if batch.base_sequence >= 0:
                self._sequence_gap(tp, seq, error)
        if seq is not None:
            _trim(seq.window)
        if seq is not None and not seq.inflight:
            self._resolve(tp, seq)

    def _split(self, tp, seq: PartitionSequences | None, batch: ProducerBatch, what: str) -> None:
        """MESSAGE_TOO_LARGE on a batch of several records (the topic's max.message.bytes is below
        batch.size, or compression did not pay): send its records again as two halves, as Kafka's
        producer splits such a batch; a single record still too large fails with the error. Under
        idempotence the halves take the batch's sequence numbers and its place in the window, so the
        partition's later batches (refused as out of order meanwhile) are retried behind them."""
        parts = self.accumulator.split(batch)
        log.warning(
            "%s: MESSAGE_TOO_LARGE for %d records; resending them as batches of %d and %d",
            what,
            batch.record_count,
            parts[0].record_count,
            parts[1].record_count,
        )
        if seq is not None and batch.base_sequence >= 0:
            sequence = batch.base_sequence
            for part in parts:
                part.set_producer_state(batch.producer_id, batch.producer_epoch, sequence)
                sequence = (sequence + part.record_count) & 0x7FFFFFFF
            seq.window = deque(
                replacement
                for queued in seq.window
                for replacement in (parts if queued is batch else (queued,))
            )
        self.accumulator.requeue(tp, parts)
        self.splits += 1
        self.metrics.splits.record()

    def _sequence_gap(self, tp, seq: PartitionSequences | None, error: BaseException) -> None:
        """A batch with a sequence number failed for good: later sequences cannot be written as they are."""
        if self.txn.is_transactional:
            self.txn.epoch_bump_required = True
            self._txn_fail(TxnEvent.FAIL_ABORTABLE, error)
        elif seq is not None:
            seq.bump = True

    def _txn_error(self) -> BaseException:
        error = self.txn.last_error
        if isinstance(error, TransactionAbortableError) or self.txn.state is TxnState.FATAL_ERROR and error:
            return error
        return TransactionAbortableError(f"the transaction failed ({error}); abort it")

    def _txn_fail(self, event: TxnEvent, error: BaseException) -> None:
        try:
            self.txn.transition(event, error)
        except KafkaError:
            pass  # already in FATAL_ERROR, or not in a transaction any more

    def _resolve(self, tp: tuple[str, int], seq: PartitionSequences) -> None:
        """The partition has nothing in flight: bump the epoch if needed and requeue retries in order."""
        if seq.bump:
            self._bump_epoch()
            pending = sorted(
                seq.retry + [b for b in self.accumulator.queued(tp) if b.base_sequence >= 0 and not b.done],
                key=lambda b: b.base_sequence,
            )
            seq.epoch, seq.next_sequence = self.txn.producer_epoch, 0
            seq.known_to_broker = -1  # the broker may have lost the producer (UNKNOWN_PRODUCER_ID)
            for batch in pending:
                batch.set_producer_state(self.txn.producer_id, seq.epoch, seq.next_sequence)
                seq.next_sequence = (seq.next_sequence + batch.record_count) & 0x7FFFFFFF
            log.warning(
                "%s-%d: epoch bumped to %d, %d unacknowledged batches renumbered from sequence 0",
                tp[0],
                tp[1],
                seq.epoch,
                len(pending),
            )
            seq.bump = False
        if seq.retry:
            retry, seq.retry = seq.retry, []
            self.accumulator.requeue(tp, [b for b in retry if not b.done])
        self.wakeup()

    def _bump_epoch(self) -> None:
        """KIP-360 for an idempotent producer: a new epoch, chosen locally."""
        if self.txn.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise KafkaError(
                "producer epoch exhausted; restart the producer", ErrorCode.INVALID_PRODUCER_EPOCH
            )
        self.txn.set_producer(self.txn.producer_id, self.txn.producer_epoch + 1)
        self.epoch_bumps += 1

    def reset_sequences(self) -> None:
        """After a new producer id or epoch from InitProducerId: every partition starts at sequence 0."""
        for seq in self.partitions.values():
            seq.epoch, seq.next_sequence, seq.bump = self.txn.producer_epoch, 0, False

    def _complete(
        self, batch: ProducerBatch, base_offset: int, log_append_time: int, error, *, count: bool = True
    ) -> None:
        """Complete a batch; a failure counts in record-error-* unless ``count`` is False (batches
        failed unsent by an abort or a close, which Kafka does not count as send errors either)."""
        if not batch.done:
            self.accumulator.memory.release(batch.reserved)
            if error is not None and count:
                self.metrics.failed(batch, time.monotonic())
        batch.complete(base_offset, log_append_time, error)

    def fail_queued(self, error: BaseException) -> int:
        """Complete every batch not yet sent with ``error`` (abort_transaction, close)."""
        batches = self.accumulator.drain_all()
        for seq in self.partitions.values():
            batches.extend(seq.retry)
            seq.retry = []
        for batch in batches:
            self._complete(batch, -1, -1, error, count=False)
        return len(batches)

    def _expire(self, now: float) -> None:
        """Fail the queued batches past delivery.timeout.ms. An expired batch that had a sequence
        leaves a gap: its partition moves to a new epoch, at once if nothing of it is in flight (no
        answer would come to do it, and the partition would stay blocked behind the bump)."""
        gaps: dict[tuple[str, int], PartitionSequences] = {}
        for batch in self.accumulator.expire(now, self.delivery_timeout_s):
            error = DeliveryTimeoutError(
                f"{len(batch.timestamps)} records for {batch.topic}-{batch.partition} expired: not sent "
                f"within delivery.timeout.ms ({self.config.delivery_timeout_ms} ms)"
            )
            self._complete(batch, -1, -1, error)
            if batch.base_sequence >= 0:
                tp = (batch.topic, batch.partition)
                seq = self.partitions.get(tp)
                self._sequence_gap(tp, seq, error)
                if seq is not None:
                    gaps[tp] = seq
        for tp, seq in gaps.items():
            _trim(seq.window)
            if not seq.inflight:
                self._resolve(tp, seq)

    def _next_expiry(self, now: float) -> float | None:
        """Seconds until the oldest queued batch reaches delivery.timeout.ms (None: nothing queued).
        The loop wakes then even when no answer or new record comes, so a batch its partition holds
        back still fails in time instead of waiting for ever."""
        oldest = self.accumulator.oldest_created()
        if oldest is None:
            return None
        return max(0.0, oldest + self.delivery_timeout_s - now)

    # -- metadata and transactions ------------------------------------------------------------------

    def _request_metadata(self) -> None:
        if self._metadata_task is None or self._metadata_task.done():
            topics = sorted(
                {tp[0] for tp in self.accumulator.partitions()} | set(self.network.partition_counts)
            )
            self._metadata_task = asyncio.get_running_loop().create_task(self._refresh(topics))

    async def _refresh(self, topics: list[str]) -> None:
        try:
            await asyncio.sleep(self.retry_backoff_s)
            await self.network.refresh(topics)
        except KafkaError as exc:
            log.warning("metadata refresh failed: %s", exc)
        finally:
            self.wakeup()

    def _maybe_add_partitions(self) -> None:
        if (
            self.txn.state is not TxnState.IN_TRANSACTION
            and self.txn.state is not TxnState.COMMITTING_TRANSACTION
        ):
            return
        if not self.txn.partitions_to_add():
            return
        if self._add_partitions_task is None or self._add_partitions_task.done():
            from onceflow.client.producer.txn_requests import add_partitions_to_txn

            self._add_partitions_task = asyncio.get_running_loop().create_task(
                self._add_partitions(add_partitions_to_txn)
            )

    async def _add_partitions(self, add_partitions_to_txn) -> None:
        try:
            await add_partitions_to_txn(self.network, self.txn, self.txn.partitions_to_add(), self.config)
        except KafkaError as exc:
            event = (
                TxnEvent.FAIL_FATAL if getattr(exc, "code", None) in FATAL_CODES else TxnEvent.FAIL_ABORTABLE
            )
            self._txn_fail(event, exc)
            log.warning("AddPartitionsToTxn failed: %s", exc)
        finally:
            self.wakeup()


def _too_large(what: str, batch: ProducerBatch, message: str) -> RecordTooLargeError:
    """MESSAGE_TOO_LARGE for a batch that cannot be split (one record): Kafka's RecordTooLargeException."""
    size = batch.size()
    return RecordTooLargeError(
        f"{what}: MESSAGE_TOO_LARGE: the broker refused a batch of {batch.record_count} record"
        f"{'s' if batch.record_count != 1 else ''} ({size} bytes) as larger than the topic's "
        "max.message.bytes (or the broker's message.max.bytes); raise it or send smaller records"
        + (f" (broker: {message})" if message else "")
    )


def _within(window: deque[ProducerBatch], batch: ProducerBatch, limit: int) -> bool:
    """Is ``batch`` among the first ``limit`` batches of ``window``?"""
    for position, queued in enumerate(window):
        if position >= limit:
            return False
        if queued is batch:
            return True
    return True  # not in the window (renumbered after an epoch bump): nothing to protect


def _trim(window: deque[ProducerBatch]) -> None:
    """Drop completed batches from the front: the window starts at the earliest unacknowledged one."""
    while window and window[0].done:
        window.popleft()


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
