"""What adds, removes or replaces whole segments of a :class:`onceflow.log.log.Log` (mixed into it):
rolling a new segment, retention, DeleteRecords, installing a segment the cleaner rewrote, and
truncation (a follower cutting a diverging tail, or starting over at the leader's log start). Each
changes the segment list, the transaction indexes, the leader epochs and the producer state together.

The log start offset is the first offset a reader may see. Retention deletes whole segments, which
moves it to the next segment's base. DeleteRecords (``delete_records_before``) can move it inside a
segment: the records below it stay on disk but are never read, and the segments wholly below it are
deleted. Such a start is kept in ``log-start-offset`` in the partition directory, written (fsynced,
renamed) before DeleteRecords is answered, so an acknowledged deletion survives a crash. Kafka keeps
one checkpoint per data directory, written every minute, and can forget a recent deletion in a crash.

Replication: a leader's appends stamp its leader epoch into each batch header (outside the CRC, as the
base offset) and ``leader_epochs`` records where each epoch started (``leader-epoch-checkpoint``); a
follower's appends (``AppendOrigin.REPLICATION``, see ``follower_append``) keep the leader's offsets and
epochs and run through the same producer-state validation, transaction index and LSO as the leader's.
``truncate_to`` cuts the epochs with the log and rebuilds the producer state from the newest snapshot at
or below the new end plus a replay. The high watermark is the log end until a replicated partition sets
it; the LSO never passes it, and retention never deletes a segment that reaches it.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from onceflow.log.loader import (
    CLEANED_SUFFIX,
    finish_swap,
    write_log_start_offset,
    write_swap_list,
)
from onceflow.log.producer_snapshot import delete_snapshots_before
from onceflow.log.segment import NO_TIMESTAMP, LogSegment, segment_file_name
from onceflow.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from onceflow.protocol.errors import OffsetOutOfRange

log = logging.getLogger(__name__)


class SegmentChanges:
    def roll(self) -> None:
        """Start a new segment at the log end (nothing to do when the active one is empty)."""
        if self._segments[-1].size > 0:
            self._roll_at(self.log_end_offset, self._clock_ms())

    def _roll_at(self, base_offset: int, now: int) -> LogSegment:
        self._directory_changed = True
        old = self._segments[-1]
        old.write_indexes()
        old.release_reserved()
        # The snapshot covers everything below the new segment: recovery replays at most the active one.
        self.producer_state.take_snapshot(self.directory)
        self._bytes_since_snapshot = 0
        segment = LogSegment.open(
            self.directory, base_offset, self.config.index_interval_bytes, now, recover=False
        )
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._txn_indexes[base_offset] = self._open_txn_index(base_offset)
        self._unflushed.add(segment)
        log.info(
            "rolled %s: new segment at offset %d (previous %d bytes)",
            self.directory.name,
            base_offset,
            old.size,
        )
        return segment

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by retention.ms (largest timestamp) and retention.bytes (total size),
        oldest first, never the active one. Returns how many segments were deleted."""
        if not self.config.delete:
            return 0  # cleanup.policy=compact: the cleaner keeps the latest record of each key forever
        now = self._clock_ms() if now_ms is None else now_ms
        deleted = 0
        if self.config.retention_ms >= 0:
            deleted += self._delete_oldest(
                lambda s: now - _largest_timestamp(s) > self.config.retention_ms, "retention.ms"
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_in_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_oldest(over_size, "retention.bytes")
        if deleted:
            delete_snapshots_before(self.directory, self.log_start_offset)
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start (records below it are never read again) and
        delete the segments wholly below it; returns the log start afterwards. An offset at or below
        the current start changes nothing (Kafka answers with the start as it is). Raises
        ``OffsetOutOfRange`` for an offset below 0 or above the high watermark."""
        hw = self.high_watermark
        if offset < 0 or offset > hw:
            raise OffsetOutOfRange(
                f"cannot delete records of {self.directory.name} below offset {offset}: "
                f"it is outside [0, {hw}] (the high watermark)"
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        write_log_start_offset(self.directory, offset)  # durable before the segments go
        self._deleted_below = offset
        if self._delete_oldest(self._below_log_start, "records deleted below the log start"):
            delete_snapshots_before(self.directory, self._segments[0].base_offset)
        self.leader_epochs.truncate_from_start(offset)
        log.info("deleted records of %s below offset %d", self.directory.name, offset)
        return offset

    def _below_log_start(self, _oldest: LogSegment) -> bool:
        # _delete_oldest only asks while a next segment exists.
        return self._bases[1] <= self._deleted_below

    def _delete_oldest(self, should_delete: Callable[[LogSegment], bool], reason: str) -> int:
        """Delete segments from the oldest while ``should_delete`` says so: never the active one, nor one
        holding offsets at or above the high watermark (a replica may still need them)."""
        count = 0
        while (
            len(self._segments) > 1
            and self._bases[1] <= self.high_watermark
            and should_delete(self._segments[0])
        ):
            self._directory_changed = True
            segment = self._segments.pop(0)
            self._bases.pop(0)
            self._unflushed.discard(segment)
            segment.delete()
            self._txn_indexes.pop(segment.base_offset).delete()
            count += 1
            log.info(
                "deleted segment %s of %s (%s); log start offset now %d",
                segment.base_offset,
                self.directory.name,
                reason,
                self.log_start_offset,
            )
        if count:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        return count

    def replace_segments(self, sources: list, cleaned: Path, aborted: list[AbortedTxn]) -> bool:
        """Put the cleaned file ``cleaned`` (``<base>.log.cleaned``, fsynced) in place of the consecutive
        sealed segments ``sources`` (the cleaner's ``SourceSegment``s; the first one's base is the new
        segment's), with ``aborted`` as its ``.txnindex``. False, with nothing changed, when those
        segments are no longer the log's as the cleaner saw them.

        Crash-safe: the ``<base>.swap`` file listing the replaced bases is the commit point. Written, the
        swap is finished by whoever comes next (this call, or ``open()`` after a crash); not written, the
        ``.cleaned`` files are leftovers and the old segments stay.
        """
        bases = [source.base_offset for source in sources]
        if self._closed:
            cleaned.unlink(missing_ok=True)
            return False
        first = bisect_right(self._bases, bases[0]) - 1
        current = self._segments[first : first + len(sources)]
        if (
            first < 0
            or first + len(sources) >= len(self._segments)  # never the active segment
            or [s.base_offset for s in current] != bases
            or any(s.size != source.size for s, source in zip(current, sources, strict=True))
        ):
            cleaned.unlink(missing_ok=True)
            return False
        base = bases[0]
        if aborted:
            txn_path = self.directory / (segment_file_name(base, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX)
            with open(txn_path, "wb") as f:
                f.write(b"".join(txn.encode() for txn in aborted))
                f.flush()
                os.fsync(f.fileno())
        write_swap_list(self.directory, base, bases)  # the commit point
        for segment in current:
            self._unflushed.discard(segment)
            segment.close()
            self._txn_indexes.pop(segment.base_offset).close()
        finish_swap(self.directory, base, bases)
        segment = LogSegment.open(
            self.directory, base, self.config.index_interval_bytes, self._clock_ms(), recover=True
        )
        segment.created_ms = current[-1].created_ms
        self._segments[first : first + len(sources)] = [segment]
        self._bases[first : first + len(sources)] = [base]
        self._txn_indexes[base] = self._open_txn_index(base)
        log.info(
            "cleaned %s: segments %s -> one segment at %d (%d -> %d bytes)",
            self.directory.name,
            bases,
            base,
            sum(source.size for source in sources),
            segment.size,
        )
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove everything from ``offset`` on (from the start of the batch holding it)."""
        if offset >= self.log_end_offset:
            # Nothing to cut, but a leader epoch this log started and never wrote in (it lost the
            # leadership first) must go: a follower's last epoch decides where it diverges.
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        self._directory_changed = True
        now = self._clock_ms()
        while self._segments and self._segments[-1].base_offset >= offset:
            segment = self._segments.pop()
            self._bases.pop()
            self._unflushed.discard(segment)
            segment.delete()
            self._txn_indexes.pop(segment.base_offset).delete()
        if not self._segments:
            segment = LogSegment.open(
                self.directory, offset, self.config.index_interval_bytes, now, recover=False
            )
            self._segments.append(segment)
            self._bases.append(offset)
            self._txn_indexes[offset] = self._open_txn_index(offset)
        self._txn_indexes[self._bases[-1]].truncate_to(offset)
        self._segments[-1].truncate_to(offset)
        if self._deleted_below > self.log_end_offset:
            self._deleted_below = self.log_end_offset
            write_log_start_offset(self.directory, self._deleted_below)
        self._unflushed.add(self._segments[-1])
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        if self._high_watermark is not None and self._high_watermark > self.log_end_offset:
            self._high_watermark = self.log_end_offset
        # Producer state may describe batches that are gone: reload from a snapshot not beyond the new
        # end (later ones are deleted) and replay the rest.
        state = self.producer_state
        self.replay_producer_state(
            state.truncate_and_reload(self.log_start_offset, self.log_end_offset, self.directory, now_ms=now)
        )
        log.info("truncated %s to offset %d", self.directory.name, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it again at ``offset``: a follower whose log ends below the leader's
        log start holds nothing the leader still has."""
        self._directory_changed = True
        for segment in self._segments:
            self._unflushed.discard(segment)
            segment.delete()
        for index in self._txn_indexes.values():
            index.delete()
        segment = LogSegment.open(
            self.directory, offset, self.config.index_interval_bytes, self._clock_ms(), recover=False
        )
        self._segments, self._bases = [segment], [offset]
        self._txn_indexes = {offset: self._open_txn_index(offset)}
        self._unflushed.add(segment)
        self._deleted_below = offset
        write_log_start_offset(self.directory, offset)
        self.producer_state.truncate_fully_and_start_at(offset, self.directory)
        self.leader_epochs.clear()
        if self._high_watermark is not None:
            self._high_watermark = offset
        log.info("emptied %s: it starts again at offset %d", self.directory.name, offset)


def _largest_timestamp(segment: LogSegment) -> int:
    # Kafka falls back to the file's modification time when no record carries a timestamp.
    if segment.max_timestamp != NO_TIMESTAMP:
        return segment.max_timestamp
    return int(segment.log_path.stat().st_mtime * 1000)
