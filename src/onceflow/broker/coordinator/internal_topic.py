"""An internal topic on the broker's partition logs: the runtime's :class:`PartitionWriter` for both
``__consumer_offsets`` and ``__transaction_state``.

- The topic is created (internal, with the configured partition count) on the first append, as Kafka
  creates it on the first request that needs it; if it exists, its own partition count wins (the
  key -> partition hash must not change under existing data).
- An append is one batch written as a coordinator append (``AppendOrigin.COORDINATOR``): a record of
  ``__transaction_state`` as one uncompressed record built with its header, nothing parsed back;
  offsets and group records as one batch (transactional for TxnOffsetCommit); a COMMIT/ABORT marker
  as a control batch carrying the transaction coordinator's epoch. A failing disk is
  KAFKA_STORAGE_ERROR, which the runtime answers as NOT_COORDINATOR (the fault point
  ``fail-coordinator-append`` makes an append fail that way).
- On a cluster node only the partitions this broker leads are read and written: another's read as
  empty, and an append to one fails with NOT_LEADER_OR_FOLLOWER, which the runtime answers as
  NOT_COORDINATOR (clients find the coordinator again).
- Commits come from the partition (``Partition.add_high_watermark_listener``): the writer listens to
  each partition it reads or writes and passes its high watermark to the runtime.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow.broker.coordinator.records import StoredBatch
from onceflow.broker.coordinator.writer import HighWatermarkListener
from onceflow.broker.faults import FAIL_COORDINATOR_APPEND
from onceflow.log.append_origin import AppendOrigin
from onceflow.protocol.errors import KafkaError, KafkaStorageError
from onceflow.protocol.record_codec import decode_batches, encode_batch
from onceflow.protocol.records import build_one_record_batch, control_batch_for_append, read_header

if TYPE_CHECKING:
    from onceflow.broker.faults import Faults
    from onceflow.broker.topics import Partition, Topic, TopicManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class InternalTopicWriter:
    def __init__(
        self, topics: TopicManager, name: str, num_partitions: int, faults: Faults | None = None
    ) -> None:
        self._topics = topics
        self._faults = faults
        self.name = name
        existing = topics.get(name)
        self._num_partitions = num_partitions if existing is None else len(existing.partitions)
        if existing is not None and self._num_partitions != num_partitions:
            log.info(
                "%s has %d partitions (configured %d); keeping the existing count",
                name,
                self._num_partitions,
                num_partitions,
            )
        self._listener: HighWatermarkListener | None = None
        # Partition objects by index, looked up once per topic object (a deleted and re-created topic
        # is a new object, so no stale partition is ever written).
        self._topic: Topic | None = None
        self._partitions: dict[int, Partition] = {}

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def set_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    def _partition(self, index: int, *, create: bool) -> Partition | None:
        topic = self._topics.get(self.name)
        if topic is None:
            if not create:
                return None
            topic = self._topics.create_topic(self.name, self._num_partitions, internal=True)
        if topic is not self._topic:
            self._topic, self._partitions = topic, {}
        found = self._partitions.get(index)
        if found is None:
            found = self._partitions[index] = self._topics.get_partition(self.name, index)
            found.add_high_watermark_listener(lambda hw, index=index: self._on_high_watermark(index, hw))
        elif found.log is None or found.leader_id != self._topics.node_id:
            self._topics.get_partition(self.name, index)  # led elsewhere now: NOT_LEADER_OR_FOLLOWER
        return found

    def _local(self, index: int) -> Partition | None:
        """The partition if it exists and this broker leads it (on a cluster, another broker's
        coordinator has the partitions it leads)."""
        try:
            return self._partition(index, create=False)
        except KafkaError:
            return None

    def _existing_or_new(self, index: int) -> Partition:
        found = self._partition(index, create=True)
        if found is None:  # create=True always finds one
            raise KafkaStorageError(f"{self.name} could not be created")
        return found

    def _on_high_watermark(self, index: int, hw: int) -> None:
        if self._listener is not None:
            self._listener(index, hw)

    def append(self, partition: int, batch: StoredBatch) -> int:
        if self._faults is not None and self._faults.fire(FAIL_COORDINATOR_APPEND):
            raise KafkaStorageError(f"{self.name}-{partition}: fault {FAIL_COORDINATOR_APPEND}")
        target = self._existing_or_new(partition)
        now = _now_ms()
        if batch.control:
            header, data = control_batch_for_append(
                batch.producer_id,
                batch.producer_epoch,
                commit=batch.commit,
                coordinator_epoch=batch.coordinator_epoch,
                timestamp_ms=now,
            )
            view = memoryview(data)
        elif len(batch.records) == 1 and not batch.transactional:
            key, value = batch.records[0]
            header, data = build_one_record_batch(key, value, timestamp_ms=now)
            view = memoryview(data)
        else:
            encoded = encode_batch(
                batch.records,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                transactional=batch.transactional,
                timestamp_ms=now,
            )
            view = memoryview(encoded)
            header = read_header(view)
        try:
            target.append([(header, view)], origin=AppendOrigin.COORDINATOR)
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}-{partition}: {exc}") from exc
        return target.log.log_end_offset

    def read(self, partition: int) -> Iterator[StoredBatch]:
        target = self._local(partition)
        if target is None:
            return
        plog = target.log
        for header, view in plog.iter_batches(plog.log_start_offset):
            try:
                decoded = next(iter(decode_batches(view)))
            except (KafkaError, StopIteration) as exc:
                log.warning("%s-%d: skipping an unreadable batch: %s", self.name, partition, exc)
                continue
            control = decoded.control
            yield StoredBatch(
                records=tuple((r.key, r.value) for r in decoded.records if r.key is not None)
                if control is None
                else (),
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                transactional=header.is_transactional,
                control=header.is_control,
                commit=bool(control and control.commit),
                coordinator_epoch=control.coordinator_epoch if control else -1,
            )

    def log_end_offset(self, partition: int) -> int:
        target = self._local(partition)
        return 0 if target is None else target.log.log_end_offset

    def high_watermark(self, partition: int) -> int:
        target = self._local(partition)
        return 0 if target is None else target.high_watermark
