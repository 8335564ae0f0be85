"""The append path of :class:`onceflow.log.log.Log` (mixed into it). Append is "validate → assign
offsets → write → update state", all per batch, never per record: the producer's bytes are stored as they came, with ``baseOffset`` patched (it lies outside the CRC) and,
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
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import NamedTuple

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.producer_append import (
    apply_producer_appends,
    find_duplicate,
    validate_producer_batches,
)
from onceflow.log.producer_entry import CompletedTxn
from onceflow.log.producer_snapshot import delete_snapshots_inside_segment
from onceflow.log.segment import LogSegment
from onceflow.log.txn_index import AbortedTxn
from onceflow.log.validator import validate_client_batches
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidRecord, MessageTooLarge, RecordListTooLarge
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

# Bytes appended between periodic producer snapshots (not a Kafka setting: Kafka snapshots only at roll).
PRODUCER_SNAPSHOT_INTERVAL_BYTES = 64 * 1024 * 1024


class AppendResult(NamedTuple):
    """What an append did (a named tuple: one is made per append, and building a frozen dataclass of
    five fields costs several times more)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


class LogAppend:
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
