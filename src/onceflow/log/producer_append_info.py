"""Validation of one producer's batches before they are written: Kafka's ``ProducerAppendInfo``.

A ``ProducerAppendInfo`` starts from a copy of the producer's entry, checks each batch of an append
against it (epoch, then sequence for client appends), and accumulates the updated entry and the
transactions the append starts. It never touches the manager: ``ProducerStateManager.update(info)``
merges the result once the bytes are in the log, so a rejected append leaves no trace.

Rules, as in Kafka (``AppendOrigin.CLIENT``):

- an epoch older than the producer's current one is ``INVALID_PRODUCER_EPOCH``;
- a newer epoch must start at sequence 0, unless the partition has no state for the producer
  (``OUT_OF_ORDER_SEQUENCE_NUMBER`` otherwise);
- within the current epoch the first sequence must follow the last one (2147483647 → 0); a gap, a
  partial overlap, or a resend older than the cached batches is ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- a producer the partition has no state for (new, expired, or whose batches retention removed) may
  start at any sequence (KIP-360). Kafka's log layer therefore never answers ``UNKNOWN_PRODUCER_ID``
  since 2.5, and neither does ours.

One deliberate difference: Kafka lets *every* batch of one append from an unknown producer through
without a sequence check; we check the second and later batches against the first, since only the
start of a producer's history is unknown.

``AppendOrigin.REPLICATION`` (replay during recovery, followers) skips the sequence check and only logs
an older epoch; ``COORDINATOR`` checks epochs but not sequences (its batches carry none).
"""

from __future__ import annotations

import logging

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.producer_entry import (
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    TxnMetadata,
    is_next_sequence,
)
from onceflow.protocol.errors import (
    ErrorCode,
    InvalidProducerEpoch,
    InvalidTxnState,
    KafkaError,
    OutOfOrderSequence,
)
from onceflow.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE

log = logging.getLogger(__name__)


class ProducerAppendInfo:
    """The validated effect of one append on one producer's state, not yet applied."""

    def __init__(
        self,
        topic_partition: str,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: AppendOrigin,
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.origin = origin
        self._current = current_entry
        # The entry as this append leaves it, holding only the batches appended here (see
        # ProducerStateEntry.merged_with); epoch, timestamps and transaction state start as the current.
        self._updated = ProducerStateEntry(
            producer_id,
            current_entry.epoch,
            (),
            current_entry.coordinator_epoch,
            current_entry.last_timestamp,
            current_entry.current_txn_first_offset,
        )
        self._started: list[TxnMetadata] = []

    @property
    def current_entry(self) -> ProducerStateEntry:
        return self._current

    def to_entry(self) -> ProducerStateEntry:
        """The producer's state after this append (only this append's batches; see merged_with)."""
        return self._updated

    def started_transactions(self) -> list[TxnMetadata]:
        return list(self._started)

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Validate a data batch at offsets ``first_offset..last_offset`` and record it.

        Raises ``InvalidProducerEpoch``, ``OutOfOrderSequence`` or ``InvalidTxnState``; on error this
        info must be discarded (the caller rejects the whole append).
        """
        self._check_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        txn_first_offset = self._updated.current_txn_first_offset
        if txn_first_offset is not None and not is_transactional:
            raise InvalidTxnState(
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset} "
                f"in partition {self.topic_partition}: its transaction started at offset {txn_first_offset}"
            )
        batch = BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
        if txn_first_offset is None and is_transactional:
            self._updated = self._updated.with_batch(epoch, batch, txn_first_offset=first_offset)
            self._started.append(TxnMetadata(self.producer_id, first_offset))
        else:
            self._updated = self._updated.with_batch(epoch, batch)

    def append_end_txn_marker(
        self,
        *,
        is_commit: bool,
        coordinator_epoch: int,
        epoch: int,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Validate a COMMIT/ABORT marker at ``offset``; the completed transaction, if one was open.

        A marker with no open transaction (an empty transaction, or a retried marker) completes nothing.
        """
        self._check_epoch(epoch, offset)
        current_coordinator_epoch = self._updated.coordinator_epoch
        if current_coordinator_epoch > coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {coordinator_epoch} (zombie), {current_coordinator_epoch} (current)"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise KafkaError(message, ErrorCode.TRANSACTION_COORDINATOR_FENCED)
            log.info(message)
        first_offset = self._updated.current_txn_first_offset
        completed = None
        if first_offset is not None:
            completed = CompletedTxn(self.producer_id, first_offset, offset, is_aborted=not is_commit)
        self._updated = self._updated.with_txn_ended(epoch, coordinator_epoch, timestamp)
        return completed

    def _check_epoch(self, epoch: int, offset: int) -> None:
        current = self._updated.epoch
        if epoch >= current:
            return
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} in partition {self.topic_partition} "
            f"is {epoch}, which is smaller than the last seen epoch {current}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            # The leader already accepted it; a follower or a replay must not diverge from the log.
            log.warning(message)
            return
        raise InvalidProducerEpoch(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self._updated.epoch:
            # A new epoch (fencing or KIP-360 epoch bump) restarts the sequence at 0, unless the
            # partition knows nothing of the producer.
            if first_seq != 0 and self._updated.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequence(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} "
                    f"in partition {self.topic_partition}: {epoch} (request epoch), {first_seq} "
                    f"(seq. number), {self._updated.epoch} (current producer epoch)"
                )
            return
        if not self._updated.is_empty:
            last_seq = self._updated.last_seq  # an earlier batch of this same append
        elif self._current.epoch == NO_PRODUCER_EPOCH:
            return  # KIP-360: no state (new, expired or retention-removed producer) → any start
        elif epoch == self._current.epoch:
            last_seq = self._current.last_seq
        else:
            last_seq = NO_SEQUENCE  # a marker in this append moved the epoch: start again at 0
        if not is_next_sequence(last_seq, first_seq):
            raise OutOfOrderSequence(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in "
                f"partition {self.topic_partition}: {first_seq} (incoming seq. number), {last_seq} "
                f"(current end sequence number)"
            )

    def __repr__(self) -> str:
        entry = self._updated
        return (
            f"ProducerAppendInfo(producer_id={self.producer_id}, epoch={entry.epoch}, "
            f"first_seq={entry.first_seq}, last_seq={entry.last_seq}, "
            f"current_txn_first_offset={entry.current_txn_first_offset}, "
            f"coordinator_epoch={entry.coordinator_epoch}, started={self._started})"
        )
