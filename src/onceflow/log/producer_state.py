"""Per-partition state of idempotent and transactional producers: Kafka's ``ProducerStateManager``.

A plain, synchronous state machine with no I/O except its snapshot files. For each producer id it keeps
the epoch, the metadata of the last five batches (to answer resends with their original offsets), the
coordinator epoch, the last timestamp and the first offset of an open transaction.

The append protocol is *prepare, then update* (``Log.append`` drives it):

1. for a client append, ``find_duplicate_batch`` first: a hit is answered with the cached batch's
   offsets and nothing is written;
2. ``prepare_update(pid, origin)`` returns a ``ProducerAppendInfo`` working on a copy; each batch goes
   through ``append_data_batch`` (which raises the Kafka error on a bad epoch or sequence);
3. after the bytes are in the log, ``update(info)`` merges the result and ``update_map_end_offset``
   records how far the state covers the log.

Recovery is the same path with ``AppendOrigin.REPLICATION``: ``load_latest`` (or ``truncate_and_reload``)
loads the newest valid snapshot and returns the offset from which the caller replays the log.
Snapshots keep all five batches per producer (see ``producer_snapshot``) so that a restart never
forgets a duplicate.

Deliberate difference from Kafka: a snapshot exactly at the log start offset is kept (Kafka deletes
snapshots at or below it); it is the only record of producers whose batches retention removed, and
segments are rolled with a snapshot at their base offset, so it is the one retention leaves usable.
"""

from __future__ import annotations

import logging
from pathlib import Path

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.producer_append_info import ProducerAppendInfo
from onceflow.log.producer_entry import (
    NO_PRODUCER_ID,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    TxnMetadata,
)
from onceflow.log.producer_snapshot import (
    CorruptSnapshot,
    delete_snapshot,
    list_snapshots,
    read_snapshot,
    remove_temp_files,
    snapshot_path,
    write_snapshot,
)

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnMetadata",
]

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000  # Kafka's producer.id.expiration.ms


class ProducerStateManager:
    """The producer state of one partition (``topic_partition`` is used in messages, e.g. ``"t-0"``)."""

    def __init__(
        self, topic_partition: str, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset of each open transaction → its metadata; the smallest key bounds the LSO
        self._ongoing_txns: dict[int, TxnMetadata] = {}
        self._map_end_offset = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The log offset up to which this state reflects the log (exclusive)."""
        return self._map_end_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def find_duplicate_batch(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch a client resend duplicates (same pid, epoch and sequence range), if any."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        return entry.find_duplicate_batch(epoch, first_seq, last_seq)

    def active_producers(self) -> list[ProducerStateEntry]:
        """Every producer with state here, by producer id (for DescribeProducers)."""
        return [self._producers[pid] for pid in sorted(self._producers)]

    def ongoing_transactions(self) -> list[TxnMetadata]:
        return [self._ongoing_txns[offset] for offset in sorted(self._ongoing_txns)]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return min(self._ongoing_txns) if self._ongoing_txns else None

    # -- the append path -----------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """A validator for an append by ``producer_id``; changes nothing here until ``update``."""
        current = self._producers.get(producer_id) or ProducerStateEntry.empty(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply a validated append (call only once its batches are in the log)."""
        if info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"cannot record producer state without a producer id in {self.topic_partition}")
        appended = info.to_entry()
        current = self._producers.get(info.producer_id)
        self._producers[info.producer_id] = appended if current is None else current.merged_with(appended)
        for txn in info.started_transactions():
            self._ongoing_txns[txn.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Forget an open transaction once its marker is written (and the txn index updated)."""
        txn = self._ongoing_txns.pop(completed.first_offset, None)
        if txn is None or txn.producer_id != completed.producer_id:
            raise ValueError(
                f"no open transaction of producer {completed.producer_id} starting at offset "
                f"{completed.first_offset} in partition {self.topic_partition}"
            )

    # -- expiration ----------------------------------------------------------------------------

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """Idle for producer.id.expiration.ms and without an open transaction."""
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Drop idle producers; returns their ids. They may later start again at any sequence."""
        expired = [pid for pid, entry in self._producers.items() if self.is_expired(entry, now_ms)]
        for pid in expired:
            del self._producers[pid]
        if expired:
            log.debug("expired %d producer(s) in %s: %s", len(expired), self.topic_partition, expired)
        return expired

    # -- snapshots and recovery ----------------------------------------------------------------

    def take_snapshot(self, directory: Path) -> Path | None:
        """Write a snapshot at ``map_end_offset`` (at segment roll and clean shutdown).

        Returns its path, or None when a snapshot at that offset already exists (the state up to an
        offset never changes once written, so it would hold the same producers).
        """
        path = snapshot_path(directory, self._map_end_offset)
        if path.exists():
            return None
        return write_snapshot(directory, self._map_end_offset, self._producers.values())

    def load_latest(self, directory: Path, log_start: int, log_end: int, *, now_ms: int | None = None) -> int:
        """Replace the state with the newest valid snapshot in ``[log_start, log_end]``.

        Snapshots outside that range and corrupt ones are deleted. Returns the offset from which the
        caller must replay the log (through ``prepare_update(pid, AppendOrigin.REPLICATION)``,
        ``update`` and ``update_map_end_offset``): the snapshot's offset, or ``log_start`` if none is
        usable. With ``now_ms``, producers already expired are not loaded.
        """
        directory = Path(directory)
        remove_temp_files(directory)
        self._delete_snapshots_outside(directory, log_start, log_end)
        self._clear()
        for snapshot in reversed(list_snapshots(directory)):
            try:
                entries = read_snapshot(snapshot.path)
            except CorruptSnapshot as exc:
                log.warning("deleting corrupt producer snapshot in %s: %s", self.topic_partition, exc)
                delete_snapshot(snapshot.path)
                continue
            for entry in entries:
                if now_ms is None or not self.is_expired(entry, now_ms):
                    self._load_entry(entry)
            self._map_end_offset = snapshot.offset
            log.info(
                "loaded %d producer(s) of %s from snapshot %s",
                len(self._producers),
                self.topic_partition,
                snapshot.path.name,
            )
            return snapshot.offset
        self._map_end_offset = log_start
        return log_start

    def truncate_and_reload(
        self, log_start: int, log_end: int, snapshot_dir: Path, *, now_ms: int | None = None
    ) -> int:
        """Bring the state in line with a log now spanning ``[log_start, log_end)``.

        After a truncation (or at startup) the state is reloaded from the newest snapshot not beyond
        ``log_end``; when the log end still matches, only the out-of-range snapshots go. Returns the
        offset from which the caller must replay the log up to ``log_end`` (== ``log_end`` when there
        is nothing to replay).
        """
        snapshot_dir = Path(snapshot_dir)
        if log_end != self._map_end_offset:
            return self.load_latest(snapshot_dir, log_start, log_end, now_ms=now_ms)
        self._delete_snapshots_outside(snapshot_dir, log_start, log_end)
        self._map_end_offset = max(self._map_end_offset, log_start)
        return self._map_end_offset

    def truncate_fully_and_start_at(self, offset: int, snapshot_dir: Path) -> None:
        """Forget everything: the log was emptied and restarts at ``offset``."""
        self._clear()
        for snapshot in list_snapshots(snapshot_dir):
            delete_snapshot(snapshot.path)
        self._map_end_offset = offset

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self._ongoing_txns[first] = TxnMetadata(entry.producer_id, first)

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()

    def _delete_snapshots_outside(self, directory: Path, log_start: int, log_end: int) -> None:
        for snapshot in list_snapshots(directory):
            if snapshot.offset > log_end or snapshot.offset < log_start:
                log.info(
                    "deleting producer snapshot %s of %s: outside the log [%d, %d]",
                    snapshot.path.name,
                    self.topic_partition,
                    log_start,
                    log_end,
                )
                delete_snapshot(snapshot.path)
