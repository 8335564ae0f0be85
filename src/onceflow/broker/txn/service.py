"""The transaction coordinator wired into a broker: its log on ``__transaction_state``, its markers
written to the partition logs, its timers.

- :class:`TopicTransactionLog` is the coordinator's ``TransactionLogWriter``: one record per append,
  one batch per record, appended to ``__transaction_state``-``p`` as a coordinator append. The topic is
  created (internal, ``transaction.state.log.num.partitions`` partitions) on the first append, as Kafka
  does on the first transactional request; if it exists, its own partition count wins.
- :func:`write_marker` appends one COMMIT/ABORT control batch to one partition; both the local
  :class:`LocalMarkerWriter` (the coordinator's markers) and the WriteTxnMarkers handler use it. A
  marker written to ``__consumer_offsets`` also tells the group coordinator to publish or drop the
  producer's pending offsets.
- :class:`TransactionService` builds the coordinator at broker start, replays the log, finishes
  transactions caught in PrepareCommit/PrepareAbort, and runs the abort/expiry timers.

One broker is the only coordinator, so the coordinator epoch is fixed at 0: markers from a previous
run of the same broker carry the same epoch, which the partitions accept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from onceflow.broker import faults as fault_points
from onceflow.broker.txn.config import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TransactionConfig
from onceflow.broker.txn.coordinator import TransactionCoordinator
from onceflow.broker.txn.markers import TxnMarker
from onceflow.broker.txn.pid_manager import ProducerIdManager
from onceflow.log.append_origin import AppendOrigin
from onceflow.protocol.errors import ErrorCode, KafkaError, UnknownTopicOrPartition
from onceflow.protocol.record_codec import decode_batches
from onceflow.protocol.records import build_one_record_batch, control_batch_for_append

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TopicTransactionLog:
    """``__transaction_state`` on the broker's partition logs."""

    def __init__(self, topics: Any, num_partitions: int) -> None:
        self._topics = topics
        topic = topics.get(TRANSACTION_STATE_TOPIC)
        self.num_partitions = num_partitions if topic is None else len(topic.partitions)
        # Partition objects by index, looked up once per topic object (a deleted and re-created
        # topic is a new object, so the cache never hands out a stale partition).
        self._topic: Any = None
        self._partitions: dict[int, Any] = {}

    def _partition(self, partition: int) -> Any:
        topic = self._topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            topic = self._topics.create_topic(TRANSACTION_STATE_TOPIC, self.num_partitions, internal=True)
        if topic is not self._topic:
            self._topic, self._partitions = topic, {}
        found = self._partitions.get(partition)
        if found is None:
            found = self._partitions[partition] = self._topics.get_partition(
                TRANSACTION_STATE_TOPIC, partition
            )
        return found

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        # One record, uncompressed, no producer id: built with its header, nothing parsed back.
        header, batch = build_one_record_batch(key, value, timestamp_ms=_now_ms())
        try:
            self._partition(partition).append([(header, memoryview(batch))], origin=AppendOrigin.COORDINATOR)
        except OSError as exc:
            raise KafkaError(
                f"{TRANSACTION_STATE_TOPIC}-{partition}: {exc}", ErrorCode.KAFKA_STORAGE_ERROR
            ) from exc

    def records(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) of every partition, each partition in log order."""
        topic = self._topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return
        for partition in topic.partitions:
            plog = partition.log
            if plog is None or partition.leader_id != self._topics.node_id:
                continue  # led by another broker: its coordinator replays it
            for _header, view in plog.iter_batches(plog.log_start_offset):
                try:
                    decoded = list(decode_batches(view))
                except KafkaError as exc:
                    log.warning(
                        "%s-%d: skipping an unreadable batch: %s",
                        TRANSACTION_STATE_TOPIC,
                        partition.index,
                        exc,
                    )
                    continue
                for batch in decoded:
                    if batch.control is not None:
                        continue
                    for record in batch.records:
                        if record.key is not None:
                            yield record.key, record.value


def write_marker(
    topics: Any,
    groups: Any,
    topic: str,
    partition: int,
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
) -> None:
    """Append one transaction marker to ``topic``-``partition``; raises UNKNOWN_TOPIC_OR_PARTITION if
    it does not exist, or the log's error. A marker for a producer with no open transaction there (a
    re-sent marker) is accepted and completes nothing."""
    target = topics.get_partition(topic, partition)  # raises UnknownTopicOrPartition
    header, batch = control_batch_for_append(
        producer_id,
        producer_epoch,
        commit=commit,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=_now_ms(),
    )
    target.append([(header, memoryview(batch))], origin=AppendOrigin.COORDINATOR)
    if topic == CONSUMER_OFFSETS_TOPIC and groups is not None:
        groups.on_txn_marker(producer_id, commit)


class LocalMarkerWriter:
    """The coordinator's :class:`~onceflow.broker.txn.markers.MarkerWriter`: this broker leads every
    partition, so markers go straight to the logs."""

    def __init__(self, topics: Any, groups: Any, faults: Any) -> None:
        self._topics = topics
        self._groups = groups
        self._faults = faults

    async def write_markers(self, marker: TxnMarker) -> None:
        if self._faults is not None and self._faults.fire(fault_points.CRASH_AFTER_PREPARE):
            # The decision (PrepareCommit/PrepareAbort) is in __transaction_state; no marker is.
            log.error("fault crash-after-prepare: exiting before the markers of %r", marker.transactional_id)
            logging.shutdown()
            os._exit(1)
        for topic, partition in sorted(marker.partitions):
            try:
                write_marker(
                    self._topics,
                    self._groups,
                    topic,
                    partition,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    commit=marker.commit,
                    coordinator_epoch=marker.coordinator_epoch,
                )
            except UnknownTopicOrPartition:
                log.info("skipping the marker for deleted partition %s-%d", topic, partition)
            except OSError as exc:
                raise KafkaError(
                    f"marker to {topic}-{partition}: {exc}", ErrorCode.KAFKA_STORAGE_ERROR
                ) from exc


def transaction_config_from(broker_config: Any, topics: Any = None) -> TransactionConfig:
    """The coordinator's settings from the broker config (same Kafka names, snake case). The
    ``__consumer_offsets`` partition count must be the group coordinator's: the topic's own count if
    it exists, else the group coordinator's default (the group for AddOffsetsToTxn hashes onto it)."""
    from onceflow.broker.group.config import GroupCoordinatorConfig

    defaults = TransactionConfig()
    names = (
        "transactional_id_expiration_ms",
        "transaction_max_timeout_ms",
        "transaction_state_log_num_partitions",
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        "transaction_remove_expired_transaction_cleanup_interval_ms",
    )
    values = {name: getattr(broker_config, name, getattr(defaults, name)) for name in names}
    offsets = topics.get(CONSUMER_OFFSETS_TOPIC) if topics is not None else None
    values["offsets_topic_num_partitions"] = (
        len(offsets.partitions)
        if offsets is not None
        else GroupCoordinatorConfig().offsets_topic_num_partitions
    )
    return TransactionConfig(**values)


class TransactionService:
    """The broker's transaction coordinator and its timers. Start inside the broker's event loop."""

    def __init__(
        self,
        broker_config: Any,
        topics: Any,
        groups: Any,
        faults: Any,
        producer_ids: ProducerIdManager | None = None,
        wrap_markers: Any = None,
    ) -> None:
        """``wrap_markers``: on a cluster node, takes the local marker writer and gives the one that
        also reaches partitions led by other brokers (``server.txn_markers``)."""
        self.config = transaction_config_from(broker_config, topics)
        self._topics = topics
        self._groups = groups
        # Share the broker's allocator (InitProducerId for idempotent producers uses it too): two
        # allocators over one data dir could hand out the same id.
        self.producer_ids = producer_ids or ProducerIdManager(broker_config.data_dir)
        self.log = TopicTransactionLog(topics, self.config.transaction_state_log_num_partitions)
        self.coordinator = TransactionCoordinator(
            log_writer=self.log,
            marker_writer=(wrap_markers or (lambda local: local))(LocalMarkerWriter(topics, groups, faults)),
            producer_ids=self.producer_ids,
            config=self.config,
            complete_in_background=True,
        )
        self._timers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        coordinator = self.coordinator
        coordinator.begin_loading(COORDINATOR_EPOCH)
        coordinator.load_from_records(self.log.records())
        done = await coordinator.retry_incomplete_transactions()
        if done:
            log.info("completed %d transaction(s) found in PrepareCommit/PrepareAbort: %s", len(done), done)
        abort_ms = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        expire_ms = self.config.transaction_remove_expired_transaction_cleanup_interval_ms
        self._timers = [
            asyncio.create_task(self._every(abort_ms, self._abort_and_retry), name="txn-abort-timer"),
            asyncio.create_task(
                self._every(expire_ms, coordinator.expire_transactional_ids), name="txn-expiry"
            ),
        ]

    async def _abort_and_retry(self) -> None:
        await self.coordinator.abort_timed_out_transactions()
        await self.coordinator.retry_incomplete_transactions()

    @staticmethod
    async def _every(interval_ms: int, job: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await job()
            except Exception:
                log.exception("transaction coordinator timer failed")

    async def stop(self) -> None:
        for task in self._timers:
            task.cancel()
        for task in self._timers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._timers = []
        await self.coordinator.drain_completions()
        self.coordinator.shutdown()

    def write_marker(self, topic: str, partition: int, **kwargs: Any) -> None:
        """WriteTxnMarkers: the same append the coordinator's own markers use."""
        write_marker(self._topics, self._groups, topic, partition, **kwargs)
