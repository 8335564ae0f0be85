"""Value types of the broker-side producer state: one producer's entry and its cached batches.

Everything here is immutable (frozen, slotted dataclasses); "changing" an entry returns a new one, so a
:class:`~onceflow.log.producer_append_info.ProducerAppendInfo` can work on a copy and the manager only
sees the result once the batch is in the log.

Sequence numbers are int32 values that wrap from 2147483647 to 0 (Kafka's ``DefaultRecordBatch``
arithmetic); :func:`sequence_after` and :func:`sequence_before` do that arithmetic.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from onceflow.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE

# Kafka keeps the metadata of this many batches per producer (ProducerStateEntry.NUM_BATCHES_TO_RETAIN);
# the producer's max.in.flight.requests.per.connection must not exceed it for duplicates to be caught.
NUM_BATCHES_TO_RETAIN = 5

# Kafka's "absent" markers (RecordBatch.NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP, ...).
NO_TIMESTAMP = -1
NO_COORDINATOR_EPOCH = -1

SEQUENCE_MODULUS = 2**31  # sequences live in [0, 2^31 - 1] and wrap to 0


def sequence_after(sequence: int, increment: int = 1) -> int:
    """``sequence + increment``, wrapping past 2147483647 to 0."""
    return (sequence + increment) % SEQUENCE_MODULUS


def sequence_before(sequence: int, decrement: int = 1) -> int:
    """``sequence - decrement``, wrapping below 0 to 2147483647."""
    return (sequence - decrement) % SEQUENCE_MODULUS


def is_next_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq`` (2147483647 is followed by 0).

    With no last sequence (NO_SEQUENCE, -1) only 0 follows, as in Kafka.
    """
    return next_seq == sequence_after(last_seq)


class _Keep(enum.Enum):
    KEEP = "keep"


_KEEP = _Keep.KEEP  # "leave this field as it is" (None is a value of current_txn_first_offset)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the broker remembers of one appended batch: enough to answer a resend with its offsets."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset

    def has_sequence_range(self, first_seq: int, last_seq: int) -> bool:
        return self.first_seq == first_seq and self.last_seq == last_seq


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """An ongoing transaction of one producer in this partition: where its first data batch is."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT or ABORT marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state in one partition.

    ``batches`` holds up to :data:`NUM_BATCHES_TO_RETAIN` batches of the current ``epoch``, oldest
    first. ``current_txn_first_offset`` is the first offset of the producer's open transaction, or None.
    """

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None

    @classmethod
    def empty(cls, producer_id: int) -> ProducerStateEntry:
        """The state of a producer this partition knows nothing about (KIP-360: any sequence may start)."""
        return cls(producer_id)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_epoch(self, epoch: int) -> ProducerStateEntry:
        """This entry at ``epoch``: a different epoch forgets the cached batches (they belong to the old one)."""
        if epoch == self.epoch:
            return self
        return self.replaced(epoch=epoch, batches=())

    def with_batch(
        self, epoch: int, batch: BatchMetadata, *, txn_first_offset: int | None | _Keep = _KEEP
    ) -> ProducerStateEntry:
        """This entry after appending ``batch`` at ``epoch``, keeping only the newest batches;
        ``txn_first_offset``, if given, becomes ``current_txn_first_offset`` (a batch starting a
        transaction), in the same single construction."""
        kept = self.batches if epoch == self.epoch else ()
        batches = (*kept, batch)[-NUM_BATCHES_TO_RETAIN:]
        return ProducerStateEntry(
            self.producer_id,
            epoch,
            batches,
            self.coordinator_epoch,
            batch.timestamp,
            self.current_txn_first_offset if txn_first_offset is _KEEP else txn_first_offset,
        )

    def with_txn_ended(self, epoch: int, coordinator_epoch: int, timestamp: int) -> ProducerStateEntry:
        """This entry after a COMMIT/ABORT marker at ``epoch``: no transaction open (the cached
        batches go if the epoch moved, as in :meth:`with_epoch`)."""
        return ProducerStateEntry(
            self.producer_id,
            epoch,
            self.batches if epoch == self.epoch else (),
            coordinator_epoch,
            timestamp,
            None,
        )

    def merged_with(self, update: ProducerStateEntry) -> ProducerStateEntry:
        """This entry after applying ``update`` (the result of one ProducerAppendInfo).

        ``update`` holds only the batches appended in that step; they go after ours unless the epoch
        changed, in which case ours are dropped. Epoch, coordinator epoch, timestamp and transaction
        state are taken from ``update``.
        """
        kept = self.batches if update.epoch == self.epoch else ()
        return ProducerStateEntry(
            update.producer_id,
            update.epoch,
            (*kept, *update.batches)[-NUM_BATCHES_TO_RETAIN:],
            update.coordinator_epoch,
            update.last_timestamp,
            update.current_txn_first_offset,
        )

    def replaced(self, **changes) -> ProducerStateEntry:
        """A copy with some fields changed (``dataclasses.replace``, kept off the per-batch path)."""
        return dataclasses.replace(self, **changes)
