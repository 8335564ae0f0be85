"""One partition's durable log: an ordered list of segments in ``<data-dir>/<topic>-<partition>/``.

The class is put together from three parts, one idea each: this module holds the log's state, its
offsets, reads, flush and lifecycle; :mod:`onceflow.log.log_append` the append path (validation,
offsets, producer state, transactions, the flush policy); :mod:`onceflow.log.segment_changes`
everything that adds, removes or replaces whole segments (roll, retention, DeleteRecords, the
cleaner's swap, truncation).

Durability: an append is acknowledged once ``os.write`` returned, i.e. the bytes are in the OS page
cache, which survives ``kill -9`` of the process; ``flush()`` fsyncs. ``close()`` leaves a
``.clean_shutdown`` marker; ``open()`` (:mod:`onceflow.log.loader`) removes it, and without it
CRC-scans the active segment (and any segment whose index does not check out), cutting a torn tail at
the last valid batch, finishes an interrupted install of a cleaned segment, and loads the producer
state. Sealed segments were complete when they rolled, so they are not rescanned.

Not thread-safe: the broker calls one partition's Log from one task at a time.
"""

from __future__ import annotations

import logging
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from onceflow.log.config import LogConfig
from onceflow.log.durable_file import fsync_directory
from onceflow.log.leader_epoch import UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from onceflow.log.loader import (  # noqa: F401 - LOG_START_OFFSET_FILE, CLEANED_SUFFIX: importable from here as before
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    LOG_START_OFFSET_FILE,
    load_log,
)
from onceflow.log.log_append import PRODUCER_SNAPSHOT_INTERVAL_BYTES, LogAppend
from onceflow.log.producer_append import replay_producer_batches
from onceflow.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from onceflow.log.segment import LogSegment, segment_file_name
from onceflow.log.segment_changes import SegmentChanges
from onceflow.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from onceflow.protocol.errors import OffsetOutOfRange
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log(LogAppend, SegmentChanges):
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int],
        segments: list[LogSegment],
        producer_state: ProducerStateManager,
        log_start_offset: int = 0,
        *,
        clean: bool = False,
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock_ms = clock_ms
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        # Set by DeleteRecords; the first segment's base wins when retention has gone past it.
        self._deleted_below = log_start_offset
        # What flush() must fsync: the segments written since the last flush, and the directory when files
        # came or went. After a clean shutdown everything is on disk already, so closing a partition that
        # was never written costs no fsync but the marker's (stopping 3,000 idle partitions took 9 s).
        self._unflushed: set[LogSegment] = set() if clean else set(segments[-1:])
        self._directory_changed = not clean
        # A flush(indexes=False) left the active segment's saved indexes behind its data: the next
        # flush with indexes (close's) writes them, so that a clean restart can trust them.
        self._active_indexes_behind = False
        # Set by the loader: the log had segments but no clean-shutdown marker (a crash or a kill),
        # so it was recovered (the broker's start summary names it).
        self.recovered_unclean = False
        # For flush.messages / flush.ms: records appended since the last fsync, and when that was.
        self._records_since_flush = 0
        self._last_flush_ms = clock_ms()
        self._closed = False
        self.producer_state = producer_state
        self.producer_snapshot_interval_bytes = PRODUCER_SNAPSHOT_INTERVAL_BYTES
        self._bytes_since_snapshot = 0
        # Aborted transactions per segment (by base offset), in each segment's .txnindex.
        self._txn_indexes = {
            segment.base_offset: self._open_txn_index(segment.base_offset) for segment in segments
        }
        # Which leader epoch wrote which offsets (replication; see leader_epoch), kept within the log's range.
        self.leader_epochs = LeaderEpochCache.load(directory, rebuild=self._batch_epochs)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        # None: the high watermark is the log end (one replica). A replicated partition sets it.
        self._high_watermark: int | None = None

    # --- opening and recovery ---

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Create or recover the partition directory (:func:`onceflow.log.loader.load_log`).

        ``producer_id_expiration_ms`` is the broker's ``producer.id.expiration.ms``."""
        return load_log(
            cls,
            Path(directory),
            config,
            clock_ms=clock_ms,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )

    def delete_segments_below_log_start(self) -> int:
        """Delete the segments wholly below the log start (a crash between writing the log start and
        deleting them leaves them behind)."""
        return self._delete_oldest(self._below_log_start, "records deleted below the log start")

    def replay_producer_state(self, replay_from: int) -> int:
        """Bring the producer state from ``replay_from`` (its snapshot) up to the log end; returns how
        many producer batches were replayed."""
        end = self.log_end_offset
        replayed = 0
        # The aborted-transaction index is rebuilt for the replayed part, never trusted there.
        for index in self._txn_indexes.values():
            index.truncate_to(replay_from)
        if replay_from < end:
            batches = self.iter_batches(max(replay_from, self.log_start_offset))
            replayed = replay_producer_batches(self.producer_state, batches, replay_from, self._complete_txn)
        self.producer_state.update_map_end_offset(end)
        return replayed

    def _open_txn_index(self, base_offset: int) -> TransactionIndex:
        return TransactionIndex(self.directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX))

    def _batch_epochs(self) -> Iterator[tuple[int, int]]:
        """``(leader epoch, base offset)`` of every stored batch (to rebuild a damaged epoch checkpoint)."""
        for segment in self._segments:
            for _position, header in segment.headers():
                yield header.partition_leader_epoch, header.base_offset

    # --- offsets ---

    @property
    def log_start_offset(self) -> int:
        base = self._segments[0].base_offset
        return base if base >= self._deleted_below else self._deleted_below

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The end of what every in-sync replica holds: consumers read below it. Until a replicated
        partition sets it (``update_high_watermark``), the log end (one replica commits on write)."""
        hw = self._high_watermark
        return self.log_end_offset if hw is None else hw

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped into ``[log start, log end]`` (the leader from its ISR's log
        ends, a follower from the leader's answers, a restart from the checkpoint); returns it."""
        hw = min(max(offset, self.log_start_offset), self.log_end_offset)
        self._high_watermark = hw
        return hw

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """OffsetsForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``, or None if unknown."""
        found, offset = self.leader_epochs.end_offset_for(epoch, self.log_end_offset)
        return None if offset == UNDEFINED_EPOCH_OFFSET else (found, offset)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark: read_committed
        consumers read below it."""
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        if first_unstable is None:
            return hw
        # A transaction that began below a DeleteRecords start holds the LSO at the start (as Kafka's
        # maybeIncrementFirstUnstableOffset): nothing below it can be read anyway.
        return min(max(first_unstable, self.log_start_offset), hw)

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first; the last is the active one (read-only use: the cleaner's plan)."""
        return list(self._segments)

    def aborted_txns_in_segment(self, base_offset: int) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the segment at ``base_offset``."""
        return self._txn_indexes[base_offset].entries

    def segment_paths(self) -> list[Path]:
        return [segment.log_path for segment in self._segments]

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms without an open transaction (the broker
        calls this every producer.id.expiration.check.interval.ms); returns their ids."""
        return self.producer_state.remove_expired_producers(self._clock_ms() if now_ms is None else now_ms)

    # --- reading ---

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (Fetch read_committed):
        searched from the segment holding ``fetch_offset``, since a transaction overlapping the range
        has its marker at or after it."""
        found: list[AbortedTxn] = []
        first = max(bisect_right(self._bases, fetch_offset) - 1, 0)
        for base in self._bases[first:]:
            entries, complete = self._txn_indexes[base].collect(fetch_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but at least one batch
        when ``min_one_batch``), stopping before any batch whose base offset is >= ``max_offset``.

        The first batch may start before ``offset``: consumers skip the records below it, as with Kafka.
        """
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(
                f"Fetch offset {offset} is out of range for {self.directory.name}: "
                f"[{self.log_start_offset}, {end}]"
            )
        if max_offset is not None and max_offset >= end:
            max_offset = None
        if offset >= end or (max_offset is not None and offset >= max_offset):
            return b""
        first = bisect_right(self._bases, offset) - 1
        for segment in self._segments[first:]:
            data = segment.read(offset, max_bytes, max_offset, min_one_batch)
            if data is not None:
                return data
        return b""

    def iter_batches(self, from_offset: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every batch from the one holding ``from_offset`` to the log end, CRC-checked, read in chunks
        (for producer-state replay after a snapshot). The first may start before ``from_offset``."""
        first = max(bisect_right(self._bases, from_offset) - 1, 0)
        for segment in self._segments[first:]:
            found = segment.find_batch(from_offset)
            if found is None:
                continue
            for _position, header, view in segment.scan(found[0]):
                yield header, view

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start with a timestamp >=
        ``timestamp_ms``, or None."""
        start = self.log_start_offset
        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_timestamp(timestamp_ms, start)
                if found is not None:
                    return found
        return None

    # --- durability and lifecycle ---

    def flush(self, *, indexes: bool = True) -> None:
        """fsync every segment written since the last flush, with its indexes, and the directory (when
        anything was written or files came or went). ``indexes=False`` leaves the offset and time
        indexes to the roll or close that seals them (see ``LogSegment.flush``): the data is as durable,
        with one fsync instead of four, and the directory is fsynced only when files came or went."""
        active = self._segments[-1]
        if indexes and self._active_indexes_behind:
            self._unflushed.add(active)
        if not self._unflushed and not self._directory_changed:
            return
        for segment in list(self._unflushed):
            segment.flush(indexes=indexes)
            self._txn_indexes[segment.base_offset].flush()
        self._active_indexes_behind = not indexes and (
            self._active_indexes_behind or active in self._unflushed
        )
        directory_changed = self._directory_changed
        self._unflushed = set()
        self._directory_changed = False
        self._records_since_flush = 0
        self._last_flush_ms = self._clock_ms()
        if indexes or directory_changed:  # index files are replaced through a rename
            fsync_directory(self.directory)

    def close(self) -> None:
        """Flush, leave the clean-shutdown marker and close the files. Idempotent."""
        if self._closed:
            return
        self.flush()
        # With this snapshot at the log end, a clean restart replays nothing.
        self.producer_state.take_snapshot(self.directory)
        for segment in self._segments:
            segment.close()
        for index in self._txn_indexes.values():
            index.close()
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        marker.touch()
        fsync_directory(self.directory)
        self._closed = True

    def abandon(self) -> None:
        """Close the files without flushing or marking a clean shutdown: what a crash leaves behind
        (for fault injection and tests; the next open recovers as after ``kill -9``)."""
        for segment in self._segments:
            segment.close()
        for index in self._txn_indexes.values():
            index.close()
        self._closed = True

    def reconfigure(self, config: LogConfig) -> None:
        """New settings from now on (a topic config change): later appends, rolls and retention use
        them; existing segments stay as they are (a smaller segment.bytes applies at the next roll)."""
        self.config = config

    def delete(self) -> None:
        """Close the files and remove the partition directory."""
        for segment in self._segments:
            segment.close()
        for index in self._txn_indexes.values():
            index.close()
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Log({self.directory}, [{self.log_start_offset}, {self.log_end_offset}), {len(self._segments)} segments)"
