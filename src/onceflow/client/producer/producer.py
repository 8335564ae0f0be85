"""AsyncProducer: Kafka's producer on asyncio (idempotent by default, transactional with a
transactional.id).

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = await producer.send("orders", b"value", key=b"k")   # queued, not yet sent
        metadata = await future                                       # acknowledged: offset known

Transactions (read-process-write, exactly once)::

    producer = AsyncProducer({"bootstrap.servers": ..., "transactional.id": "orders-app-0"})
    await producer.start()
    await producer.init_transactions()          # fences older producers with this transactional.id
    producer.begin_transaction()
    await producer.send("out", value)
    await producer.send_offsets_to_transaction({("in", 0): next_offset}, "my-group")
    await producer.commit_transaction()         # or abort_transaction()

Errors: :class:`ProducerFencedError` (fatal: close), :class:`TransactionAbortableError` (abort and
retry), :class:`IllegalTransactionStateError` (calls out of order); see ``producer.errors``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from onceflow.client.arguments import check_headers, check_int, check_str
from onceflow.client.connection import BrokerConnectionError
from onceflow.client.consumer.structs import ConsumerGroupMetadata
from onceflow.client.metrics import MetricsSnapshot, elapsed_ns
from onceflow.client.producer import txn_requests
from onceflow.client.producer.accumulator import (
    RECORD_SIZE_SLACK,
    RecordAccumulator,
    serialized_size_upper_bound,
)
from onceflow.client.producer.batch import RecordFuture, RecordMetadata, failed_future
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.errors import (
    FATAL_CODES,
    BufferExhaustedError,
    FatalProducerError,
    IllegalTransactionStateError,
    ProducerClosedError,
    RecordTooLargeError,
    TransactionAbortedError,
)
from onceflow.client.producer.faults import ClientFaults
from onceflow.client.producer.metrics import ProducerMetrics
from onceflow.client.producer.network import ProducerNetwork
from onceflow.client.producer.partitioners import DefaultPartitioner, partitioner_for
from onceflow.client.producer.prepared_txn_state import PreparedTxnState
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager, TxnEvent, TxnState
from onceflow.protocol.compression import CompressionType
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

_NO_HEADERS: list = []  # shared: the batch builder only reads it


def _as_group_metadata(group) -> ConsumerGroupMetadata:
    """The consumer's ``group_metadata()`` as is; a group id string as Java's
    ``new ConsumerGroupMetadata(groupId)`` (generation -1, member "": the coordinator checks nothing);
    anything else with the same attribute names (aiokafka's, confluent-kafka's) field by field."""
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str):
        return ConsumerGroupMetadata(group)
    return ConsumerGroupMetadata(
        group.group_id,
        getattr(group, "generation_id", -1),
        getattr(group, "member_id", "") or "",
        getattr(group, "group_instance_id", None),
    )


def _as_offsets(offsets: Mapping) -> dict[tuple[str, int], tuple[int, str]]:
    """``{(topic, partition): (offset, metadata)}``; keys may also be objects with
    ``topic``/``partition`` and values ints or objects with ``offset`` and optionally ``metadata``
    (OffsetAndMetadata), whose metadata string is committed with the offset."""
    result = {}
    for key, value in offsets.items():
        tp = (key.topic, key.partition) if hasattr(key, "topic") else (key[0], int(key[1]))
        if hasattr(value, "offset"):
            result[tp] = (int(value.offset), getattr(value, "metadata", None) or "")
        else:
            result[tp] = (int(value), "")
    return result


def config_from(
    config: ProducerConfig | Mapping[str, Any] | None, settings: Mapping[str, Any]
) -> ProducerConfig:
    if isinstance(config, ProducerConfig):
        if settings:
            raise TypeError("pass either a ProducerConfig or settings, not both")
        return config
    return ProducerConfig.from_mapping(dict(config or {}), **settings)


class AsyncProducer:
    """Kafka's producer for asyncio. ``config`` is a :class:`ProducerConfig` or a mapping of Kafka's
    setting names (``{"bootstrap.servers": ..., "linger.ms": 5}``); keyword settings use snake case."""

    def __init__(
        self,
        config: ProducerConfig | Mapping[str, Any] | None = None,
        *,
        faults: ClientFaults | None = None,
        **settings: Any,
    ) -> None:
        self.config = config_from(config, settings)
        self.faults = faults
        self.txn = TransactionManager(self.config.transactional_id, self.config.transaction_timeout_ms)
        self._partitioner = partitioner_for(self.config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            buffer_memory=self.config.buffer_memory,
            transactional=self.txn.is_transactional,
            on_new_batch=self._wake_sender,
        )
        self._network: ProducerNetwork | None = None
        self._sender: Sender | None = None
        self._metrics = ProducerMetrics(
            self.config.client_id, compressed=self.config.compression_codec != CompressionType.NONE
        )
        memory = self._accumulator.memory
        self._metrics.gauges(
            buffer_total_bytes=lambda: memory.total,
            buffer_available_bytes=lambda: memory.total - memory.used,
            waiting_threads=lambda: memory.waiting,
            requests_in_flight=lambda: self._sender.requests_in_flight() if self._sender else 0,
            metadata_age=lambda: time.monotonic() - self._network.last_refresh if self._network else 0.0,
        )
        self._closed = False
        self._started = False
        # A record bigger than this can never be sent: no request may exceed max.request.size, and
        # its batch must fit in buffer.memory (Kafka's ensureValidRecordSize).
        self._record_size_limit = min(self.config.max_request_size, self.config.buffer_memory)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, and for an idempotent (non-transactional) producer get its producer id."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        cfg = self.config
        self._network = ProducerNetwork(
            cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            security=cfg.security,
        )
        await self._first_connection()
        self._sender = Sender(cfg, self._accumulator, self._network, self.txn, self.faults, self._metrics)
        if cfg.enable_idempotence and not self.txn.is_transactional:
            producer_id, epoch = await txn_requests.init_producer_id(self._network, self.txn, cfg)
            self.txn.set_producer(producer_id, epoch)
            log.info("idempotent producer id %d epoch %d", producer_id, epoch)
        self._sender.start()
        self._started = True

    async def _first_connection(self) -> None:
        """A bootstrap server, waited for up to max.block.ms: a producer made while its cluster starts
        (services started together) works once the cluster answers. Kafka's constructor never
        connects and its first send waits up to max.block.ms instead; here the start waits."""
        deadline = self._block_deadline()
        backoff = self.config.retry_backoff_ms / 1000.0
        while True:
            try:
                await self._network.any_connection()
                return
            except BrokerConnectionError as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrokerConnectionError(
                        f"{exc} (no bootstrap server answered within max.block.ms={self.config.max_block_ms})"
                    ) from None
                log.debug("no bootstrap server answers yet (%s); retrying", exc)
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, 1.0)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued (up to ``timeout`` seconds), then disconnect. Unsent records fail."""
        if self._closed:
            return
        self._closed = True
        if self._sender is not None:
            try:
                async with asyncio.timeout(timeout):  # not wait_for: 3.11's can lose a cancel
                    await self._sender.wait_idle()
            except TimeoutError:
                self._sender.fail_queued(ProducerClosedError("producer closed before the record was sent"))
            await self._sender.stop()
        if self._network is not None:
            await self._network.close()

    def _wake_sender(self) -> None:
        sender = self._sender
        if sender is None:
            return
        if threading.get_ident() == self._loop_thread:
            sender.wakeup()
        else:
            self._loop.call_soon_threadsafe(sender.wakeup)

    # -- sending ------------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Queue a record; returns its :class:`RecordFuture` (await it for the :class:`RecordMetadata`).

        Waits only for metadata of a new topic and for room in buffer.memory (max.block.ms in all).
        As in Kafka, a record that cannot be queued is not raised here but is the error of the future
        returned (already done): larger than max.request.size or buffer.memory
        (:class:`RecordTooLargeError`), its topic's metadata not there within max.block.ms (a
        :class:`KafkaError`, REQUEST_TIMED_OUT unless the topic's error is not retriable), or no room
        in buffer.memory within max.block.ms (:class:`BufferExhaustedError`). In a transaction such a
        failure makes the transaction fail (commit raises; abort and start again). Raised: a send
        after close, to a partition the topic does not have, or that the transaction state does not
        allow (see ``_refuse``).
        """
        if not self._started:
            await self.start()
        deadline = None
        count = self._network.partition_counts.get(topic)
        if count is None:
            deadline = self._block_deadline()
            waited = time.perf_counter()
            count = await self._topic_partitions(topic, partition, deadline)
            self._metrics.metadata_wait_time.record(elapsed_ns(waited))
            if type(count) is not int:
                return count  # refused
        created = self._accumulator.batches_created
        result = self._append(topic, value, key, partition, timestamp_ms, headers, count)
        if self._accumulator.batches_created != created:
            # A batch was started (so the previous one is full): let the sender put it on the wire
            # while we go on filling the next one, instead of only when the caller next waits.
            await asyncio.sleep(0)
        if type(result) is int:
            if deadline is None:
                deadline = self._block_deadline()
            waited = time.perf_counter()
            try:
                while type(result) is int:
                    try:
                        await self._accumulator.memory.wait_async(result, deadline)
                    except BufferExhaustedError as exc:
                        return self._refuse(topic, partition, exc)
                    result = self._append(topic, value, key, partition, timestamp_ms, headers, count)
            finally:
                self._metrics.bufferpool_wait_time.record(elapsed_ns(waited))
        return result

    async def _topic_partitions(
        self, topic: str, partition: int | None, deadline: float
    ) -> int | RecordFuture:
        """The partition count of ``topic``, waiting for its metadata up to ``deadline``; if it does not
        come, the refused record's future (see :meth:`_refuse`). A closed producer raises."""
        check_str(topic, "topic")
        try:
            return await self._network.wait_for_topic(topic, deadline)
        except ProducerClosedError:
            raise
        except KafkaError as exc:
            return self._refuse(topic, partition, exc)

    def _append(self, topic, value, key, partition, timestamp_ms, headers, count):
        """The part of send() that needs no waiting: usable from any thread (the sync facade)."""
        if self._closed:
            raise ProducerClosedError("send() after close()")
        if not (type(value) is bytes or value is None) or not (type(key) is bytes or key is None):
            _check_record_types(key, value)
        txn = self.txn
        if txn.transactional_id is not None:
            txn.check_can_send()
        if headers or (len(value) if value else 0) + (len(key) if key else 0) > (
            self._record_size_limit - RECORD_SIZE_SLACK
        ):
            if headers:
                check_headers(headers)
            too_large = self._record_size_error(key, value, headers)
            if too_large is not None:
                return self._refuse(topic, partition, too_large)
        chosen = partition is None
        if chosen:
            partition = self._partitioner.partition(topic, key, count)
        elif type(partition) is not int or not 0 <= partition < count:
            partition = check_int(partition, "partition")
            if not 0 <= partition < count:
                raise KafkaError(f"partition {partition} of {topic!r} does not exist (it has {count})", 3)
        if timestamp_ms is not None and type(timestamp_ms) is not int:
            timestamp_ms = check_int(timestamp_ms, "timestamp_ms")
        result = self._accumulator.try_append(
            topic,
            partition,
            int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            key,
            value,
            list(headers) if headers else _NO_HEADERS,
        )
        if type(result) is not int:
            if chosen:
                self._partitioner.record_appended(
                    topic, partition, (len(value) if value else 0) + (len(key) if key else 0)
                )
            if txn.transactional_id is not None and (topic, partition) not in txn.added:
                txn.maybe_add_partition((topic, partition))
                self._wake_sender()
        return result

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[list[tuple[str, bytes | None]] | None] | None = None,
    ) -> list[RecordFuture]:
        """Queue many records of one topic in one call (``keys``/``headers``: None or one per value).

        Records go to partitions as ``send`` would place them, in order within each partition, but the
        batch builder is fed in a loop with no per-record future: the result holds one
        :class:`RecordFuture` per batch used (for its last record). Await them all, or ``flush()`` and
        call ``result()`` on each, to learn whether every record was written. If any record is larger
        than max.request.size or buffer.memory, none is queued and the result is one future holding
        the :class:`RecordTooLargeError` (in a transaction, the transaction fails, as with ``send``).
        Other failures are also not raised but returned as with ``send``: without the topic's metadata
        within max.block.ms nothing is queued and the result is one future holding the error; if
        buffer.memory stays full for max.block.ms, the records not queued by then are dropped and the
        last future holds the :class:`BufferExhaustedError`.
        """
        if not self._started:
            await self.start()
        count = self._network.partition_counts.get(topic)
        if count is None:
            count = await self._topic_partitions(topic, partition, self._block_deadline())
            if type(count) is not int:
                return [count]  # refused
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        futures: list[RecordFuture] = []
        filling = self._fill_many(topic, values, keys, partition, count, timestamp, headers, futures)
        for need in filling:
            await asyncio.sleep(0)  # let the sender put full batches on the wire
            if need:
                try:  # max.block.ms per wait: each group of records is a send of its own
                    await self._accumulator.memory.wait_async(need, self._block_deadline())
                except BufferExhaustedError as exc:
                    filling.close()
                    futures.append(self._refuse(topic, partition, exc))
                    break
        return futures

    def _fill_many(
        self, topic, values, keys, partition, count, timestamp, headers, futures: list[RecordFuture]
    ) -> Iterator[int]:
        """Feed ``send_many``'s records to the batch builder, appending a future per batch used.

        Yields after each group of appends how many bytes of buffer.memory must free up before the
        next group fits (0: none, go on). The async and the sync producer differ only in how they
        wait, so each iterates this and waits its own way.
        """
        if self._closed:
            raise ProducerClosedError("send_many() after close()")
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"send_many: {len(keys)} keys for {len(values)} values")
        if self.txn.transactional_id is not None:
            self.txn.check_can_send()
        too_large = self._many_size_error(values, keys, headers)
        if too_large is not None:
            futures.append(self._refuse(topic, partition, too_large))
            return
        for part, indices in self._plan_many(topic, values, keys, partition, count):
            position = 0
            while True:
                position, need = self._append_group(
                    topic, part, timestamp, keys, values, headers, indices, position, futures
                )
                yield need
                if not need:
                    break

    def _plan_many(self, topic, values, keys, partition, count) -> list[tuple[int, Sequence[int]]]:
        """Which partition each record goes to, as ``[(partition, indices in order)]``."""
        n = len(values)
        if partition is not None:
            if not 0 <= partition < count:
                raise KafkaError(f"partition {partition} of {topic!r} does not exist (it has {count})", 3)
            return [(partition, range(n))]
        partitioner = self._partitioner
        chosen: list[int]
        if isinstance(partitioner, DefaultPartitioner) and (keys is None or partitioner.ignore_keys):
            return self._sticky_chunks(topic, values, keys, count)
        if isinstance(partitioner, DefaultPartitioner):
            # murmur2 of a key is the same every time: hash each distinct key once.
            by_key: dict[bytes, int] = {}
            chosen = []
            for key in keys:
                if key is None:
                    part = partitioner.sticky.partition(topic, None, count)
                    value = values[len(chosen)]
                    partitioner.sticky.record_appended(topic, part, len(value) if value else 0)
                    chosen.append(part)
                    continue
                part = by_key.get(key)
                if part is None:
                    part = by_key[key] = partitioner.partition(topic, key, count)
                chosen.append(part)
        else:
            chosen = [partitioner.partition(topic, None, count) for _ in range(n)]
        groups: dict[int, list[int]] = {}
        for index, part in enumerate(chosen):
            group = groups.get(part)
            if group is None:
                group = groups[part] = []
            group.append(index)
        return list(groups.items())

    def _sticky_chunks(self, topic, values, keys, count) -> list[tuple[int, Sequence[int]]]:
        """Keyless placement: stay on the sticky partition for a batch's worth of bytes, then let the
        partitioner move on, as per-record sends would (KIP-794)."""
        sticky = self._partitioner.sticky
        limit = sticky.batch_size
        chunks: list[tuple[int, Sequence[int]]] = []
        start, n = 0, len(values)
        while start < n:
            part = sticky.partition(topic, None, count)
            size, end = 0, start
            while end < n and size < limit:
                value = values[end]
                size += len(value) if value else 0
                if keys is not None and keys[end]:
                    size += len(keys[end])
                end += 1
            sticky.record_appended(topic, part, size)
            chunks.append((part, range(start, end)))
            start = end
        return chunks

    def _append_group(self, topic, part, timestamp, keys, values, headers, indices, start, futures):
        """Append one partition's records from ``start``; ``(position, bytes to wait for or 0)``."""
        if self._closed:
            raise ProducerClosedError("send_many() after close()")
        txn = self.txn
        if txn.transactional_id is not None:
            txn.check_can_send()
        position, need = self._accumulator.append_many(
            topic, part, timestamp, keys, values, headers, indices, start, futures
        )
        if position > start and txn.transactional_id is not None and (topic, part) not in txn.added:
            txn.maybe_add_partition((topic, part))
            self._wake_sender()
        return position, need

    def _record_size_error(
        self, key, value, headers, which: str = "the record", note: str = ""
    ) -> RecordTooLargeError | None:
        """Kafka's ensureValidRecordSize: the error for a record whose batch of one could exceed
        max.request.size (no request could carry it) or buffer.memory (it could never be buffered)."""
        size = serialized_size_upper_bound(key, value, headers)
        if size <= self._record_size_limit:
            return None
        if size > self.config.max_request_size:
            setting, limit = "max.request.size", self.config.max_request_size
        else:
            setting, limit = "buffer.memory", self.config.buffer_memory
        return RecordTooLargeError(
            f"{which} is {size} bytes when serialized, more than {setting} ({limit}); "
            f"raise {setting} (and the topic's max.message.bytes) or send smaller records{note}"
        )

    def _many_size_error(self, values, keys, headers) -> RecordTooLargeError | None:
        """send_many's records against the size limit, before any is queued (all or nothing)."""
        if headers is None:
            try:
                # C-speed maxima first: almost always they settle it without a per-record loop.
                longest = max(map(len, values), default=0) + (
                    max(map(len, keys), default=0) if keys is not None else 0
                )
            except TypeError:  # a None key or value: measure one by one
                longest = self._record_size_limit
            if longest <= self._record_size_limit - RECORD_SIZE_SLACK:
                return None
        for i, value in enumerate(values):
            error = self._record_size_error(
                keys[i] if keys is not None else None,
                value,
                headers[i] if headers is not None else None,
                f"record {i} of the {len(values)} given to send_many",
                f"; none of the {len(values)} was queued",
            )
            if error is not None:
                return error
        return None

    def _refuse(self, topic: str, partition: int | None, error: KafkaError) -> RecordFuture:
        """A record that failed before it was queued: too large, no metadata for its topic or no room in
        buffer.memory within max.block.ms. Kafka's doSend hands such an error (an ApiException) to the
        future and the callback instead of raising it, and a transactional producer moves to the
        abortable error state (TransactionManager.maybeTransitionToErrorState): commit_transaction()
        then fails, the transaction's queued records fail with it, and abort_transaction() starts over.
        As in Kafka, under the transaction protocol v1 the abort also bumps the epoch (InitProducerId);
        under v2 EndTxn bumps it anyway. Where that move is not allowed (no transaction begun, a fatal
        error; the state may have changed while send() waited) Kafka throws; this raises what a send
        in that state raises."""
        log.debug("send to %s refused: %s", topic, error)
        self._metrics.errors.record()  # Kafka's doSend counts these in record-error-* too
        txn = self.txn
        if txn.transactional_id is not None:
            if txn.state is not TxnState.IN_TRANSACTION and txn.state is not TxnState.ABORTABLE_ERROR:
                txn.check_can_send()  # raises
            if not txn.transaction_v2:
                txn.epoch_bump_required = True
            self._fail_transaction(error)  # a fatal error met meanwhile stays fatal
            self._wake_sender()
        return failed_future(topic, -1 if partition is None else partition, error)

    def _block_deadline(self) -> float:
        return time.monotonic() + self.config.max_block_ms / 1000.0

    async def send_and_wait(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, **kw
    ) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kw))

    async def flush(self) -> None:
        """Send everything queued now and wait until each batch is acknowledged or failed."""
        if self._sender is not None:
            started = time.perf_counter()
            try:
                await self._sender.wait_idle()
            finally:
                self._metrics.flush_time.record(elapsed_ns(started))

    def metrics(self) -> MetricsSnapshot:
        """The producer's metrics now, with Kafka's names: ``{MetricName: value}``, e.g.
        ``producer.metrics().value("record-send-total")``; see docs/client-metrics.md."""
        return self._metrics.snapshot()

    async def partitions_for(self, topic: str) -> list[int]:
        if not self._started:
            await self.start()
        count = await self._network.wait_for_topic(topic, self._block_deadline())
        return list(range(count))

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self.txn.producer_id, self.txn.producer_epoch

    # -- transactions -------------------------------------------------------------------------------

    def _require_transactional(self, what: str) -> None:
        if not self.txn.is_transactional:
            raise FatalProducerError(f"{what}() needs a transactional.id in the producer's configuration")

    async def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Get the producer id and epoch for transactional.id. This fences every earlier producer with
        the same transactional.id (their sends and commits fail with ProducerFencedError) and makes the
        coordinator finish any transaction they left open. Call once, before the first transaction.

        ``keep_prepared_txn`` (KIP-939, a producer with transaction.two.phase.commit.enable): a
        transaction the earlier producer prepared is kept instead of aborted, and this producer is then
        in it, prepared: finish it with ``complete_transaction(state)`` (or commit/abort)."""
        self._require_transactional("init_transactions")
        if keep_prepared_txn and not self.config.transaction_two_phase_commit_enable:
            raise IllegalTransactionStateError(
                "init_transactions(keep_prepared_txn=True) is for two-phase commit producers: set "
                "transaction.two.phase.commit.enable=true"
            )
        started = time.perf_counter()
        try:
            if not self._started:
                await self.start()
            self.txn.transition(TxnEvent.INIT)
            await self._init_producer_id(keep_prepared_txn)
        finally:
            self._metrics.txn_init_time.record(elapsed_ns(started))

    async def _init_producer_id(self, keep_prepared_txn: bool = False) -> None:
        ongoing = None
        try:
            if self.config.transaction_two_phase_commit_enable:
                producer_id, epoch, ongoing = await txn_requests.init_two_phase_producer_id(
                    self._network, self.txn, self.config, keep_prepared_txn=keep_prepared_txn
                )
            else:
                producer_id, epoch = await txn_requests.init_producer_id(self._network, self.txn, self.config)
        except FatalProducerError as exc:
            self.txn.transition(TxnEvent.FAIL_FATAL, exc)
            raise
        except KafkaError as exc:
            if exc.code in FATAL_CODES or exc.code == ErrorCode.UNSUPPORTED_VERSION:
                self.txn.transition(TxnEvent.FAIL_FATAL, exc)
            raise
        self.txn.set_producer(producer_id, epoch)
        self._sender.reset_sequences()
        if ongoing is not None:
            # The kept transaction is this producer's now, prepared: it ends with EndTxn under the
            # protocol the cluster uses (its partitions are already on the coordinator).
            self.txn.transition(TxnEvent.INITIALIZED_PREPARED)
            self.txn.prepared = ongoing
            self.txn.started_on_coordinator = True
            self.txn.latch_transaction_version(self._network.transaction_version())
            log.info(
                "transactional.id %r: producer id %d epoch %d, keeping the transaction prepared by epoch %d",
                self.txn.transactional_id,
                producer_id,
                epoch,
                ongoing[1],
            )
            return
        self.txn.transition(TxnEvent.INITIALIZED)
        log.info(
            "transactional.id %r: producer id %d epoch %d", self.txn.transactional_id, producer_id, epoch
        )

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939, first phase: flush the transaction's records and hold it, prepared, for an external
        coordinator. Returns the state to store with the coordinator's decision; nothing more can be
        sent in this transaction, and it never times out on the broker. Finish it with
        ``complete_transaction(state)`` (this producer, or a new one after
        ``init_transactions(keep_prepared_txn=True)``)."""
        self._require_transactional("prepare_transaction")
        if not self.config.transaction_two_phase_commit_enable:
            raise IllegalTransactionStateError(
                "prepare_transaction() needs transaction.two.phase.commit.enable=true"
            )
        self.txn.check_not_failed("prepare_transaction")
        if self.txn.state is not TxnState.IN_TRANSACTION:
            self.txn.transition(TxnEvent.PREPARE)  # raises, naming the state and what to do
        await self.flush()
        self.txn.check_not_failed("prepare_transaction")  # a record failed while flushing
        self.txn.transition(TxnEvent.PREPARE)
        self.txn.prepared = (self.txn.producer_id, self.txn.producer_epoch)
        return PreparedTxnState(*self.txn.prepared)

    @property
    def prepared_transaction_state(self) -> PreparedTxnState:
        """The prepared transaction's state (empty when none is prepared)."""
        return PreparedTxnState(*self.txn.prepared) if self.txn.prepared else PreparedTxnState()

    async def complete_transaction(self, prepared_state: PreparedTxnState | str) -> None:
        """KIP-939, second phase: commit the prepared transaction if ``prepared_state`` is its state
        (what ``prepare_transaction()`` returned, as stored by the coordinator), abort it otherwise."""
        self._require_transactional("complete_transaction")
        if isinstance(prepared_state, str):
            prepared_state = PreparedTxnState.from_string(prepared_state)
        if not isinstance(prepared_state, PreparedTxnState):
            raise TypeError(f"prepared_state must be a PreparedTxnState, not {type(prepared_state).__name__}")
        if self.txn.state is not TxnState.PREPARED_TRANSACTION:
            raise IllegalTransactionStateError(
                f"complete_transaction() needs a prepared transaction; the producer is in "
                f"{self.txn.state.value}"
            )
        if prepared_state == self.prepared_transaction_state:
            await self.commit_transaction()
        else:
            await self.abort_transaction()

    def begin_transaction(self) -> None:
        """Start a transaction (local: nothing is sent until the first record or offsets)."""
        self._require_transactional("begin_transaction")
        started = time.perf_counter()
        self.txn.transition(TxnEvent.BEGIN)
        # KIP-890: this transaction's protocol, fixed until it ends (see TransactionManager).
        self.txn.latch_transaction_version(self._network.transaction_version())
        self._metrics.txn_begin_time.record(elapsed_ns(started))

    async def send_offsets_to_transaction(self, offsets: Mapping, group_metadata) -> None:
        """Commit consumer offsets as part of the transaction: they become visible only if it commits.

        ``offsets`` maps ``(topic, partition)`` to the *next* offset to consume. ``group_metadata`` is the
        consumer's ``group_metadata()`` (generation-checked, KIP-447) or just the group id string.
        """
        self._require_transactional("send_offsets_to_transaction")
        self.txn.check_can_send()
        group = _as_group_metadata(group_metadata)
        started = time.perf_counter()
        try:
            if not self.txn.transaction_v2:  # v2: TxnOffsetCommit v5 adds the offsets partition itself
                await txn_requests.add_offsets_to_txn(self._network, self.txn, group.group_id, self.config)
            self.txn.started_on_coordinator = True
            await txn_requests.txn_offset_commit(
                self._network, self.txn, _as_offsets(offsets), group, self.config
            )
        except KafkaError as exc:
            self._fail_transaction(exc)
            raise
        finally:
            self._metrics.txn_send_offsets_time.record(elapsed_ns(started))

    async def commit_transaction(self) -> None:
        """Flush the transaction's records, then commit it. On TransactionAbortableError call
        abort_transaction(); on ProducerFencedError close the producer."""
        self._require_transactional("commit_transaction")
        self.txn.check_not_failed("commit_transaction")
        started = time.perf_counter()
        try:
            await self._commit_transaction()
        finally:
            self._metrics.txn_commit_time.record(elapsed_ns(started))

    async def _commit_transaction(self) -> None:
        self.txn.transition(TxnEvent.COMMIT)
        await self._sender.wait_idle()
        if self.txn.state is not TxnState.COMMITTING_TRANSACTION:  # a batch failed while flushing
            self.txn.check_not_failed("commit_transaction")
        try:
            if self.txn.started_on_coordinator:
                self._adopt(await txn_requests.end_txn(self._network, self.txn, True, self.config))
        except KafkaError as exc:
            self._fail_transaction(exc)
            raise
        self.txn.transition(TxnEvent.ENDED)

    async def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError, sent ones are
        marked aborted (read_committed consumers never see them)."""
        self._require_transactional("abort_transaction")
        if self.txn.state is TxnState.FATAL_ERROR:
            self.txn.check_not_failed("abort_transaction")
        started = time.perf_counter()
        try:
            await self._abort_transaction()
        finally:
            self._metrics.txn_abort_time.record(elapsed_ns(started))

    async def _abort_transaction(self) -> None:
        self.txn.transition(TxnEvent.ABORT)
        self._sender.fail_queued(
            TransactionAbortedError("the transaction was aborted before this record was sent")
        )
        await self._sender.wait_idle()
        # An empty transaction is unknown to the coordinator. Under the protocol v2 an abort that needs
        # a new epoch (a lost or rejected sequence) still sends EndTxn: its epoch bump is the new epoch
        # (Kafka's client no longer bumps with InitProducerId there).
        v2_bump = self.txn.transaction_v2 and self.txn.epoch_bump_required
        try:
            if self.txn.started_on_coordinator or v2_bump:
                self._adopt(await txn_requests.end_txn(self._network, self.txn, False, self.config))
        except KafkaError as exc:
            self._fail_transaction(exc)
            raise
        if self.txn.epoch_bump_required and not self.txn.transaction_v2:
            self.txn.transition(TxnEvent.BUMP_EPOCH)
            await self._init_producer_id()  # KIP-360: a new epoch, sequences from 0
        else:
            self.txn.transition(TxnEvent.ENDED)

    def _adopt(self, producer: tuple[int, int] | None) -> None:
        """After an EndTxn v5: the next transaction's producer id and epoch; sequences restart at 0."""
        if producer is None:
            return
        producer_id, epoch = producer
        if (producer_id, epoch) != (self.txn.producer_id, self.txn.producer_epoch):
            log.debug(
                "transactional.id %r: EndTxn gave producer id %d epoch %d",
                self.txn.transactional_id,
                producer_id,
                epoch,
            )
        self.txn.set_producer(producer_id, epoch)  # also clears epoch_bump_required
        self._sender.reset_sequences()

    def _fail_transaction(self, exc: KafkaError) -> None:
        event = TxnEvent.FAIL_FATAL if isinstance(exc, FatalProducerError) else TxnEvent.FAIL_ABORTABLE
        try:
            self.txn.transition(event, exc)
        except KafkaError:
            pass


_BYTES_LIKE = (bytes, bytearray, memoryview)


def _check_record_types(key: object, value: object) -> None:
    """A key or value must be bytes-like or None: serializing is the caller's (Kafka's serializers).
    Anything else used to fail deep in the accumulator with "object of type 'int' has no len()"."""
    for what, data in (("key", key), ("value", value)):
        if data is not None and not isinstance(data, _BYTES_LIKE):
            raise TypeError(
                f"record {what} must be bytes or None (serialize it first), not {type(data).__name__}"
            )
