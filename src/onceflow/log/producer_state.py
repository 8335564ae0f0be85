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

Loading is lazy: the snapshot's rows (``SnapshotRows``, sorted by producer id) stay as bytes, and a
producer's entry is built the first time it is looked up (then it lives in ``_producers`` and its row
is marked taken). The next snapshot copies the untaken rows as they are. So a restart with 100,000
producers costs a CRC check, not 100,000 objects, and producers idle since the restart cost nothing.

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
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    TxnMetadata,
)
from onceflow.log.producer_snapshot import (
    CorruptSnapshot,
    SnapshotRows,
    delete_snapshot,
    list_snapshots,
    read_snapshot_rows,
    remove_temp_files,
    snapshot_path,
    write_snapshot_bytes,
)
from onceflow.log.producer_snapshot_format import encode_merged
from onceflow.protocol.records import NO_PRODUCER_ID

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
        # Producers looked up or changed since the last load; the rest are rows of ``_loaded``.
        self._producers: dict[int, ProducerStateEntry] = {}
        self._loaded: SnapshotRows | None = None
        self._taken_rows: set[int] = set()  # rows of _loaded now in _producers, or dropped
        self._loaded_at_ms: int | None = None  # rows idle for the expiration time then are not loaded
        # first offset of each open transaction → its metadata; the smallest key bounds the LSO
        self._ongoing_txns: dict[int, TxnMetadata] = {}
        self._map_end_offset = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The log offset up to which this state reflects the log (exclusive)."""
        return self._map_end_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        entry = self._producers.get(producer_id)
        if entry is None and self._loaded is not None:
            row = self._loaded.find(producer_id)
            if row is not None and row not in self._taken_rows:
                return self._take_row(self._loaded, row)
        return entry

    @property
    def producer_count(self) -> int:
        """How many producers have state here (counting loaded ones not yet checked for expiry)."""
        loaded = len(self._loaded) - len(self._taken_rows) if self._loaded is not None else 0
        return len(self._producers) + loaded

    def find_duplicate_batch(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch a client resend duplicates (same pid, epoch and sequence range), if any."""
        entry = self.last_entry(producer_id)
        if entry is None:
            return None
        return entry.find_duplicate_batch(epoch, first_seq, last_seq)

    def active_producers(self) -> list[ProducerStateEntry]:
        """Every producer with state here, by producer id (for DescribeProducers)."""
        self._take_all_loaded()
        return [self._producers[pid] for pid in sorted(self._producers)]

    def ongoing_transactions(self) -> list[TxnMetadata]:
        return [self._ongoing_txns[offset] for offset in sorted(self._ongoing_txns)]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return min(self._ongoing_txns) if self._ongoing_txns else None

    # -- the append path -----------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """A validator for an append by ``producer_id``; changes nothing here until ``update``."""
        current = self.last_entry(producer_id) or ProducerStateEntry.empty(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply a validated append (call only once its batches are in the log)."""
        if info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"cannot record producer state without a producer id in {self.topic_partition}")
        appended = info.to_entry()
        current = self.last_entry(info.producer_id)
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
        if self._loaded is not None:
            # Loaded rows are checked in their bytes; expired ones are marked taken, never built.
            for row, pid in self._loaded.idle_rows(now_ms - self.producer_id_expiration_ms):
                if row not in self._taken_rows:
                    self._taken_rows.add(row)
                    expired.append(pid)
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
        data = encode_merged(self._loaded, self._taken_rows, self._producers)
        return write_snapshot_bytes(directory, self._map_end_offset, data)

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
                rows = read_snapshot_rows(snapshot.path)
            except CorruptSnapshot as exc:
                log.warning("deleting corrupt producer snapshot in %s: %s", self.topic_partition, exc)
                delete_snapshot(snapshot.path)
                continue
            self._loaded, self._loaded_at_ms = rows, now_ms
            # Open transactions bound the LSO, so they are known at once (they never expire).
            for pid, first_offset in rows.open_transactions:
                self._ongoing_txns[first_offset] = TxnMetadata(pid, first_offset)
            self._map_end_offset = snapshot.offset
            log.debug(
                "loaded %d producer(s) of %s from snapshot %s",
                len(rows),
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

    def _take_row(self, loaded: SnapshotRows, row: int) -> ProducerStateEntry | None:
        """Build a loaded row's entry (each row once), unless the producer had expired at load."""
        self._taken_rows.add(row)
        entry = loaded.entry(row)
        if self._loaded_at_ms is not None and self.is_expired(entry, self._loaded_at_ms):
            return None
        self._producers[entry.producer_id] = entry
        return entry

    def _take_all_loaded(self) -> None:
        loaded = self._loaded
        if loaded is None:
            return
        for row in range(len(loaded)):
            if row not in self._taken_rows:
                self._take_row(loaded, row)
        self._loaded, self._taken_rows = None, set()

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()
        self._loaded, self._taken_rows, self._loaded_at_ms = None, set(), None

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
