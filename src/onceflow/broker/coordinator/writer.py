"""The runtime's view of an internal topic (Kafka's ``PartitionWriter``), and one in memory for tests.

The runtime appends a coordinator's batches, reads a partition back to load it, and learns from the
partition when its records are committed. "Committed" means at or below the partition's high
watermark: with one broker that is the log end right after the append; with replication it is what
the in-sync replicas have. That is the one seam replication changes: the partition moves its high
watermark and calls the listener, and the runtime answers the requests that waited for it.

The broker's writer is :class:`~onceflow.broker.coordinator.internal_topic.InternalTopicWriter`;
:class:`InMemoryPartitionWriter` keeps batches in lists, can fail appends (a fault point) and can hold
the high watermark back (a replica that lags), for tests that need neither files nor an event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from onceflow.broker.coordinator.records import Record, StoredBatch, marker_batch

HighWatermarkListener = Callable[[int, int], None]  # (partition, new high watermark)


class PartitionWriter(Protocol):
    @property
    def num_partitions(self) -> int: ...

    def append(self, partition: int, batch: StoredBatch) -> int:
        """Append ``batch`` as one batch and return the log end offset after it. Raise (a
        :class:`~onceflow.protocol.errors.KafkaError` or ``OSError``) when nothing was written."""
        ...

    def read(self, partition: int) -> Iterable[StoredBatch]:
        """Every batch of the partition from its log start, in order (what loading replays)."""
        ...

    def log_end_offset(self, partition: int) -> int: ...

    def high_watermark(self, partition: int) -> int: ...

    def set_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        """Call ``listener`` whenever a partition's high watermark moves (one listener: the runtime)."""
        ...


class InMemoryPartitionWriter:
    """A :class:`PartitionWriter` in lists. ``fail_appends`` makes every append raise it (a broken
    disk); ``hold_high_watermark`` stops commits until :meth:`release_high_watermark`."""

    def __init__(self, num_partitions: int) -> None:
        self._num_partitions = num_partitions
        self.batches: dict[int, list[StoredBatch]] = {p: [] for p in range(num_partitions)}
        self.fail_appends: Exception | None = None
        self.hold_high_watermark = False
        self._high_watermarks = dict.fromkeys(range(num_partitions), 0)
        self._ends = dict.fromkeys(range(num_partitions), 0)
        self._listener: HighWatermarkListener | None = None

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def append(self, partition: int, batch: StoredBatch) -> int:
        if self.fail_appends is not None:
            raise self.fail_appends
        self.batches[partition].append(batch)
        self._ends[partition] += max(len(batch.records), 1)  # an offset per record, one for a marker
        end = self._ends[partition]
        if not self.hold_high_watermark:
            self._advance(partition, end)
        return end

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, *, commit: bool) -> None:
        """A marker appended from outside the coordinator (as a test's WriteTxnMarkers would)."""
        self.append(partition, marker_batch(producer_id, producer_epoch, commit=commit, coordinator_epoch=0))

    def read(self, partition: int) -> Iterator[StoredBatch]:
        return iter(list(self.batches[partition]))

    def log_end_offset(self, partition: int) -> int:
        return self._ends[partition]

    def high_watermark(self, partition: int) -> int:
        return self._high_watermarks[partition]

    def set_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    def release_high_watermark(self) -> None:
        """Commit everything appended so far (the replicas caught up)."""
        self.hold_high_watermark = False
        for partition in range(self._num_partitions):
            self._advance(partition, self.log_end_offset(partition))

    def truncate(self, partition: int, batch_count: int) -> None:
        """Keep the first ``batch_count`` batches (a crash that lost the rest)."""
        del self.batches[partition][batch_count:]
        self._ends[partition] = sum(max(len(b.records), 1) for b in self.batches[partition])
        self._high_watermarks[partition] = min(
            self._high_watermarks[partition], self.log_end_offset(partition)
        )

    def _advance(self, partition: int, offset: int) -> None:
        if offset > self._high_watermarks[partition]:
            self._high_watermarks[partition] = offset
            if self._listener is not None:
                self._listener(partition, offset)

    def records(self, partition: int) -> list[Record]:
        """Every data record of the partition, in order."""
        return [r for b in self.batches[partition] if not b.control for r in b.records]
