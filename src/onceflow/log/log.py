"""One partition's durable log: an ordered list of segments in ``<data-dir>/<topic>-<partition>/``.

Append is "validate → assign offsets → write → update state", all per batch, never per record:
the producer's bytes are stored as they came, with ``baseOffset`` patched (it lies outside the CRC) and,
for LogAppendTime topics, the timestamp fields rewritten.

Producer state (idempotence): ``Log.producer_state`` is the partition's ``ProducerStateManager``. A client
append first looks for a resend of a cached batch (answered with the original offsets, nothing written),
then validates every producer batch (epoch, sequence) before the write, and applies the result after it.
Snapshots are taken at each segment roll and at ``close()``; ``open()`` loads the newest valid one and
replays only the log after it, so a restart never forgets a duplicate it would have caught before.
Beyond Kafka, a snapshot is also taken every ``producer_snapshot_interval_bytes`` appended (64 MiB),
keeping the newest two inside the active segment: with Kafka's 1 GiB segments a crash would otherwise
replay up to a whole segment of producer batches on restart.

Transactions: the producer state knows the first offset of every open transaction; the last stable
offset (LSO) is the oldest of them, else the high watermark. When a marker completes a transaction it
is closed in the producer state and, if aborted, recorded in the ``.txnindex`` of the segment that
holds the marker (``txn_index``); ``collect_aborted_transactions`` answers read_committed fetches from
those indexes. Replay after a crash rebuilds the index entries of the replayed range.

Durability: an append is acknowledged once ``os.write`` returned, i.e. the bytes are in the OS page
cache, which survives ``kill -9`` of the process; ``flush()`` fsyncs. ``close()`` leaves a
``.clean_shutdown`` marker; ``open()`` (:mod:`onceflow.log.loader`) removes it, and without it
CRC-scans the active segment (and any segment whose index does not check out), cutting a torn tail at
the last valid batch, finishes an interrupted install of a cleaned segment, and loads the producer
state. Sealed segments were complete when they rolled, so they are not rescanned.

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

Not thread-safe: the broker calls one partition's Log from one task at a time.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.durable_file import fsync_directory
from onceflow.log.leader_epoch import UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from onceflow.log.loader import (  # noqa: F401 - LOG_START_OFFSET_FILE: importable from here as before
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    LOG_START_OFFSET_FILE,
    finish_swap,
    load_log,
    write_log_start_offset,
    write_swap_list,
)
from onceflow.log.producer_append import (
    apply_producer_appends,
    find_duplicate,
    replay_producer_batches,
    validate_producer_batches,
)
from onceflow.log.producer_entry import CompletedTxn
from onceflow.log.producer_snapshot import delete_snapshots_before, delete_snapshots_inside_segment
from onceflow.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from onceflow.log.segment import (
    NO_TIMESTAMP,
    LogSegment,
    segment_file_name,
)
from onceflow.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from onceflow.log.validator import validate_client_batches
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidRecord, MessageTooLarge, OffsetOutOfRange, RecordListTooLarge
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

# Bytes appended between periodic producer snapshots (not a Kafka setting: Kafka snapshots only at roll).
PRODUCER_SNAPSHOT_INTERVAL_BYTES = 64 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """What an append did (a named tuple: one is made per append, and building a frozen dataclass of
    five fields costs several times more)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


class Log:
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

    # --- append ---

    def append(
        self,
        batches: list[tuple[BatchHeader, memoryview]],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        leader_epoch: int | None = None,
    ) -> AppendResult:
        """Append validated batches (from ``validate_produce_records`` or ``build_control_batch``).

        Client and coordinator batches get offsets from the log end, and ``leader_epoch`` (the leader's,
        when the partition is replicated) in their headers; replicated batches keep both. Either way the
        epochs are recorded in ``leader_epochs``. Raises MessageTooLarge / RecordListTooLarge before
        anything is written (replicated batches are not held to max.message.bytes: the leader took them).
        """
        if not batches:
            return AppendResult(-1, -1, -1, self.log_start_offset)
        state = self.producer_state
        now = self._clock_ms()
        if origin is AppendOrigin.CLIENT:
            duplicate = find_duplicate(state, batches)
            if duplicate is not None:
                # Kafka answers a resend with the original offsets (and error NONE). It also returns the
                # cached timestamp as the log append time; that is only an append time on LogAppendTime
                # topics, so elsewhere we answer -1 as for any CreateTime append.
                append_time = duplicate.timestamp if self.config.log_append_time else -1
                log.debug(
                    "duplicate batch in %s answered with offsets [%d, %d]",
                    self.directory.name,
                    duplicate.first_offset,
                    duplicate.last_offset,
                )
                return AppendResult(
                    duplicate.first_offset, duplicate.last_offset, append_time, self.log_start_offset, True
                )
            batches = validate_client_batches(self.config, batches, now, self.directory.name)
        total = self._check_sizes(batches, origin)
        # Validate before writing: an epoch or sequence error raises here and nothing is written.
        producer_appends = validate_producer_batches(
            state,
            batches,
            next_offset=self.log_end_offset,
            origin=origin,
            append_time_ms=now
            if self.config.log_append_time and origin is not AppendOrigin.REPLICATION
            else -1,
        )
        buf, infos, first_offset, append_time = self._assign_offsets(batches, origin, now, leader_epoch)
        last_offset = infos[-1][0]
        active = self._segments[-1]
        if active.is_full_for(
            total, self.config.segment_bytes, self.config.segment_index_bytes, last_offset
        ) or self._too_old(active, now):
            active = self._roll_at(first_offset, now)
        if active.size == 0:
            active.created_ms = now
        active.append(buf, infos)
        self._unflushed.add(active)
        self._records_since_flush += sum(header.record_count for header, _ in batches)
        for completed in apply_producer_appends(state, producer_appends, self.log_end_offset):
            self._complete_txn(completed)
        self._record_leader_epochs(batches, origin, first_offset, leader_epoch)
        self._bytes_since_snapshot += total
        if self._bytes_since_snapshot >= self.producer_snapshot_interval_bytes:
            self._take_periodic_snapshot()
        self.flush_if_due(now)
        return AppendResult(first_offset, last_offset, append_time, self.log_start_offset)

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """fsync when ``flush.messages`` records were appended, or ``flush.ms`` has passed with
        something unflushed, since the last fsync (Kafka's per-topic flush policy; both default to
        never). The append checks after writing, so the record that reaches the count is on disk
        before its producer hears of it; the broker's periodic check covers a partition that goes
        quiet with records younger than ``flush.ms``."""
        config = self.config
        if not self._records_since_flush:
            return False
        now = self._clock_ms() if now_ms is None else now_ms
        if self._records_since_flush >= config.flush_messages or now - self._last_flush_ms >= config.flush_ms:
            self.flush()
            return True
        return False

    def _take_periodic_snapshot(self) -> None:
        """Bound what a crash makes recovery replay; keep only the newest two inside the active segment."""
        self._bytes_since_snapshot = 0
        self._directory_changed = True
        self.producer_state.take_snapshot(self.directory)
        delete_snapshots_inside_segment(self.directory, self._bases[-1])

    def _complete_txn(self, completed: CompletedTxn) -> None:
        """A marker ended a transaction: close it in the producer state and, if it was aborted, index it
        in the segment holding the marker, with the LSO as it stands once it is closed (Kafka's rule)."""
        state = self.producer_state
        state.complete_txn(completed)
        if not completed.is_aborted:
            return
        first_unstable = state.first_unstable_offset()
        lso = completed.last_offset + 1 if first_unstable is None else first_unstable
        base = self._bases[max(bisect_right(self._bases, completed.last_offset) - 1, 0)]
        self._txn_indexes[base].append(
            AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
        )

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

    def _open_txn_index(self, base_offset: int) -> TransactionIndex:
        return TransactionIndex(self.directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX))

    def _record_leader_epochs(
        self,
        batches: list[tuple[BatchHeader, memoryview]],
        origin: AppendOrigin,
        first: int,
        epoch: int | None,
    ) -> None:
        if origin is AppendOrigin.REPLICATION:
            for header, _ in batches:
                if header.partition_leader_epoch >= 0:
                    self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
        elif epoch is not None:
            self.leader_epochs.assign(epoch, first)

    def _batch_epochs(self) -> Iterator[tuple[int, int]]:
        """``(leader epoch, base offset)`` of every stored batch (to rebuild a damaged epoch checkpoint)."""
        for segment in self._segments:
            for _position, header in segment.headers():
                yield header.partition_leader_epoch, header.base_offset

    def _check_sizes(self, batches: list[tuple[BatchHeader, memoryview]], origin: AppendOrigin) -> int:
        total = 0
        for header, view in batches:
            size = len(view)
            if size > self.config.max_message_bytes and origin is not AppendOrigin.REPLICATION:
                raise MessageTooLarge(
                    f"The record batch size in the append to {self.directory.name} is {size} bytes which exceeds "
                    f"the maximum configured value of {self.config.max_message_bytes} (max.message.bytes)."
                )
            if size != header.size:
                raise InvalidRecord(f"batch view has {size} bytes but its header says {header.size}")
            total += size
        if total > self.config.segment_bytes:
            raise RecordListTooLarge(
                f"Message batch size is {total} bytes in append to partition {self.directory.name} which exceeds "
                f"the maximum configured segment size of {self.config.segment_bytes}."
            )
        return total

    def _assign_offsets(
        self,
        batches: list[tuple[BatchHeader, memoryview]],
        origin: AppendOrigin,
        now: int,
        leader_epoch: int | None = None,
    ) -> tuple[bytearray | memoryview, list[tuple[int, int, int]], int, int]:
        """Patch offsets (and LogAppendTime) into the bytes; returns them with each batch's
        ``(last offset, max timestamp, size)``, the first offset and the append time (-1 if none)."""
        if len(batches) == 1 and not batches[0][1].readonly:
            buf: bytearray | memoryview = batches[0][1]  # the producer's own bytes, patched in place
        else:
            buf = bytearray().join(view for _, view in batches)  # one copy, then one write
        keep_offsets = origin is AppendOrigin.REPLICATION
        append_time = now if self.config.log_append_time and not keep_offsets else -1
        stamp_epoch = leader_epoch is not None and not keep_offsets
        next_offset = self.log_end_offset
        first_offset = batches[0][0].base_offset if keep_offsets else next_offset
        if first_offset < next_offset:
            raise InvalidRecord(
                f"replicated batch starts at offset {first_offset}, below the log end {next_offset}"
            )
        infos = []
        position = 0
        for header, view in batches:
            offset = header.base_offset if keep_offsets else next_offset
            if offset < next_offset:
                raise InvalidRecord(f"batch offset {offset} goes backwards (log end {next_offset})")
            records.set_base_offset(buf, position, offset)
            if stamp_epoch:
                records.set_partition_leader_epoch(buf, position, leader_epoch)
            max_timestamp = header.max_timestamp
            if append_time >= 0:
                records.set_log_append_time(buf, position, append_time)
                max_timestamp = append_time
            last = offset + header.last_offset_delta
            infos.append((last, max_timestamp, len(view)))
            next_offset = last + 1
            position += len(view)
        return buf, infos, first_offset, append_time

    def _too_old(self, segment: LogSegment, now: int) -> bool:
        return segment.size > 0 and now - segment.created_ms > self.config.segment_ms

    # --- segments ---

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

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms without an open transaction (the broker
        calls this every producer.id.expiration.check.interval.ms); returns their ids."""
        return self.producer_state.remove_expired_producers(self._clock_ms() if now_ms is None else now_ms)

    # --- reading ---

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


def _largest_timestamp(segment: LogSegment) -> int:
    # Kafka falls back to the file's modification time when no record carries a timestamp.
    if segment.max_timestamp != NO_TIMESTAMP:
        return segment.max_timestamp
    return int(segment.log_path.stat().st_mtime * 1000)
