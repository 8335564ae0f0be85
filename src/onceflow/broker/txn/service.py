"""The transaction coordinator wired into a broker: its log on ``__transaction_state``, its markers
written to the partition logs, its timers.

- The coordinator's log is the internal-topic writer of the coordinator runtime
  (:class:`~onceflow.broker.coordinator.internal_topic.InternalTopicWriter`), one record per append
  on ``__transaction_state``; the topic is created on the first append, as Kafka does on the first
  transactional request.
- :func:`write_marker` appends one COMMIT/ABORT control batch to one partition; both the local
  :class:`LocalMarkerWriter` (the coordinator's markers) and the WriteTxnMarkers handler use it. A
  marker for ``__consumer_offsets`` goes through the group coordinator, which writes it and publishes
  or drops the producer's pending offsets.
- :class:`TransactionService` builds the coordinator at broker start, loads every partition,
  finishes transactions caught in PrepareCommit/PrepareAbort, and starts the timers.

One broker is the only coordinator, so every partition is loaded under coordinator epoch 0: markers
from a previous run of the same broker carry the same epoch, which the partitions accept. With
replication the epoch is the partition's leader epoch, and a failover unloads the partition on one
broker and loads it on another (``TransactionCoordinator.load_partition`` / ``unload_partition``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from onceflow.broker import faults as fault_points
from onceflow.broker.coordinator.commits import committed
from onceflow.broker.coordinator.internal_topic import InternalTopicWriter
from onceflow.broker.coordinator.runtime import STARTUP_COORDINATOR_EPOCH
from onceflow.broker.coordinator.scheduler import AsyncioScheduler
from onceflow.broker.txn.config import TransactionConfig
from onceflow.broker.txn.coordinator import ProducerIdSource, TransactionCoordinator, TransactionDescription
from onceflow.broker.txn.markers import MarkerWriter, TxnMarker
from onceflow.broker.txn.state_manager import ListTransactionsResult
from onceflow.log.append_origin import AppendOrigin
from onceflow.protocol.errors import ErrorCode, KafkaError, UnknownTopicOrPartition
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from onceflow.protocol.records import control_batch_for_append

if TYPE_CHECKING:
    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.faults import Faults
    from onceflow.broker.group.service import GroupService
    from onceflow.broker.topics import TopicManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_marker(
    topics: TopicManager,
    groups: GroupService,
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
    re-sent marker) is accepted and completes nothing. A marker for ``__consumer_offsets`` is an
    operation of the group coordinator, whose replay of it publishes or drops the producer's offsets."""
    target = topics.get_partition(topic, partition)  # raises UnknownTopicOrPartition
    if topic == CONSUMER_OFFSETS_TOPIC:
        groups.complete_transaction(
            partition, producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch
        )
        return
    header, batch = control_batch_for_append(
        producer_id,
        producer_epoch,
        commit=commit,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=_now_ms(),
    )
    target.append([(header, memoryview(batch))], origin=AppendOrigin.COORDINATOR)


class LocalMarkerWriter:
    """The coordinator's :class:`~onceflow.broker.txn.markers.MarkerWriter`: this broker leads every
    partition, so markers go straight to the logs."""

    def __init__(self, topics: TopicManager, groups: GroupService, faults: Faults) -> None:
        self._topics = topics
        self._groups = groups
        self._faults = faults

    async def write_markers(self, marker: TxnMarker) -> None:
        if self._faults.fire(fault_points.CRASH_AFTER_PREPARE):
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


def transaction_config_from(broker_config: BrokerConfig, topics: TopicManager) -> TransactionConfig:
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
        "transaction_two_phase_commit_enable",
    )
    values = {name: getattr(broker_config, name, getattr(defaults, name)) for name in names}
    offsets = topics.get(CONSUMER_OFFSETS_TOPIC)
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
        broker_config: BrokerConfig,
        topics: TopicManager,
        groups: GroupService,
        faults: Faults,
        producer_ids: ProducerIdSource,
        wrap_markers: Callable[[MarkerWriter], MarkerWriter] | None = None,
    ) -> None:
        """``wrap_markers``: on a cluster node, takes the local marker writer and gives the one that
        also reaches partitions led by other brokers (``server.txn_markers``). ``producer_ids``: the
        broker's allocator (a single node's ``ProducerIdManager``, a cluster broker's blocks from the
        controller)."""
        self.config = transaction_config_from(broker_config, topics)
        self._topics = topics
        self._groups = groups
        # The broker's allocator (InitProducerId for idempotent producers uses it too): two allocators
        # over one data dir could hand out the same id.
        self.producer_ids = producer_ids
        self.coordinator = TransactionCoordinator(
            log_writer=InternalTopicWriter(
                topics, TRANSACTION_STATE_TOPIC, self.config.transaction_state_log_num_partitions, faults
            ),
            marker_writer=(wrap_markers or (lambda local: local))(LocalMarkerWriter(topics, groups, faults)),
            producer_ids=self.producer_ids,
            config=self.config,
            complete_in_background=True,
            scheduler=AsyncioScheduler(),
        )

    async def start(self, owned: Mapping[int, int] | None = None) -> None:
        """Load ``__transaction_state`` (``owned``: only those partitions, under those epochs), finish
        the transactions found in PrepareCommit/PrepareAbort, start the timers."""
        coordinator = self.coordinator
        coordinator.load(STARTUP_COORDINATOR_EPOCH, owned)
        done = await coordinator.retry_incomplete_transactions()
        if done:
            log.info("completed %d transaction(s) found in PrepareCommit/PrepareAbort: %s", len(done), done)
        coordinator.start_timers()

    async def stop(self) -> None:
        self.coordinator.stop_timers()
        await self.coordinator.drain_completions()
        self.coordinator.shutdown()

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions, answered once what it shows is committed."""
        described = self.coordinator.describe_transactions(transactional_ids)
        await self._all_committed()
        return described

    async def list_transactions(
        self, state_filters: Iterable[str], producer_id_filters: Iterable[int], duration_filter_ms: int
    ) -> ListTransactionsResult:
        """ListTransactions of the partitions served here (none: an empty list; raises
        COORDINATOR_LOAD_IN_PROGRESS while one loads), answered once what it shows is committed."""
        listed = self.coordinator.list_transactions(state_filters, producer_id_filters, duration_filter_ms)
        await self._all_committed()
        return listed

    async def _all_committed(self) -> None:
        runtime = self.coordinator.runtime
        for partition in runtime.active_partitions():
            await committed(runtime, partition)
