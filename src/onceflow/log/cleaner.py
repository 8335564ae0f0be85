"""Log compaction (``cleanup.policy=compact``): Kafka's log cleaner, for one partition's ``Log``.

A compacted log keeps, of every key, at least its latest record. ``__consumer_offsets`` and
``__transaction_state`` are compacted (a committed offset or a transaction state is the latest record of
its key), as are users' changelog topics. A cleaning has three steps, so that the slow middle one can run
off the broker's event loop:

1. :func:`plan` (with the log, cheap): the *cleanable* segments are the sealed segments wholly below the
   first uncleanable offset, the smallest of the active segment's base, the last stable offset (an open
   transaction's records are never compacted) and the base of the first segment with a record younger
   than ``min.compaction.lag.ms``. Of those, the ones at or after the cleaner checkpoint (where the last
   cleaning ended, ``cleaner-offset-checkpoint`` in the partition directory) are *dirty*. Nothing is done
   until the dirty bytes are ``min.cleanable.dirty.ratio`` of the cleanable bytes, or the first dirty
   record waited ``max.compaction.lag.ms``.
2. :func:`build` (anywhere: it reads the segment files through descriptors of its own and writes new
   files, touching no ``Log`` state): the offset map (each key's last offset in the dirty segments) and
   then, per group of consecutive cleanable segments up to ``segment.bytes`` together, one
   ``<base>.log.cleaned`` file holding what each record rule keeps:

   - a record with a newer record of its key in the map goes, as does a record without a key;
   - a tombstone (null value) stays ``delete.retention.ms`` after the first cleaning that found it, so
     a consumer reading from the start within that time still sees the delete. That cleaning writes the
     time it may go into its batch (KIP-534's delete horizon: the base timestamp, with attribute bit
     6; the records keep their timestamps), and a later cleaning past that time removes it. Timing it
     by the records' own timestamps would remove a delete produced with an old timestamp (a replay,
     a producer with a slow clock) at the very first cleaning, before any consumer could read it;
   - the records of an aborted transaction go (and never enter the map: an aborted value must not
     shadow a committed one);
   - a transaction marker goes once no batch of its transaction is left and its own delete horizon
     (set, as for tombstones, by the first cleaning that found it unneeded) has passed; else it stays,
     and with it the transaction's aborted-index entry;
   - a batch keeps its base offset, offset range and producer fields, and a producer's last batch (the
     one the producer state remembers, or the marker of its epoch when it has none) stays even when all
     its records go, as an empty batch: the sequence numbers and epoch read back from the log on a
     recovery without a snapshot stay right. So does the last batch of the cleaned range, so that its
     last offset still meets the next segment (a read inside the range always finds a batch after it).
3. :func:`install` (with the log): ``Log.replace_segments`` swaps each group in, crash-safe, unless the
   log changed under the build (retention, DeleteRecords, a truncation); then the checkpoint moves to
   the end of the cleaned range.

Offsets never change: a compacted log has gaps, which readers cross (a fetch at an offset that is gone
returns the next batch). The offset map is bounded by ``log.cleaner.dedupe.buffer.size`` (a cleaning
whose dirty keys do not fit ends early; the next goes on from there).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from onceflow.log.durable_file import write_atomically
from onceflow.log.log import CLEANED_SUFFIX, Log
from onceflow.log.segment import LOG_SUFFIX, segment_file_name
from onceflow.log.txn_index import AbortedTxn
from onceflow.protocol import records
from onceflow.protocol.record_codec import decode_record_objects, rebuild_batch
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# log.cleaner.dedupe.buffer.size's default: the offset map's memory budget for one cleaning. A key costs
# its length plus MAP_ENTRY_OVERHEAD bytes (a dict slot, a bytes object and an int in CPython).
DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024
MAP_ENTRY_OVERHEAD = 100
_MAX_RELATIVE_OFFSET = 2**31 - 1
_READ_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class SourceSegment:
    """A sealed segment as the plan saw it: install checks it is still the log's, unchanged."""

    base_offset: int
    next_offset: int
    size: int
    path: Path
    aborted: tuple[AbortedTxn, ...]  # its .txnindex entries


@dataclass
class CleaningPlan:
    directory: Path
    groups: list[list[SourceSegment]]
    first_dirty: int  # the checkpoint: segments at or after it are dirty
    end: int  # the base of the first segment not cleaned: the next checkpoint
    now_ms: int  # when the cleaning was planned: tombstones and markers whose delete horizon passed go
    delete_retention_ms: int  # the delete horizon a batch gets when its tombstones or marker could go
    aborted: dict[int, list[tuple[int, int]]]  # producer id -> (first, last offset) of aborted txns
    # producer id -> (last offset of its last data batch or -1, its epoch), for the active producers
    last_of_producer: dict[int, tuple[int, int]]
    dirty_bytes: int
    cleanable_bytes: int
    segment_bytes: int = 1073741824  # for regrouping when the offset map fills early
    max_map_bytes: int = DEDUPE_BUFFER_BYTES


@dataclass
class CleanedGroup:
    sources: list[SourceSegment]
    path: Path  # the <base>.log.cleaned file
    aborted: list[AbortedTxn]  # the aborted-index entries whose markers stayed


@dataclass
class CleaningResult:
    end: int  # where this cleaning stopped (the plan's end, or earlier when the offset map filled)
    groups: list[CleanedGroup] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0


def read_checkpoint(directory: Path) -> int:
    try:
        return int((directory / CHECKPOINT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def write_checkpoint(directory: Path, offset: int) -> None:
    # Losing it costs a repeated cleaning, never data: no fsync.
    write_atomically(directory / CHECKPOINT_FILE, f"{offset}\n", durable=False)


def plan(log_: Log, now_ms: int, *, max_map_bytes: int = DEDUPE_BUFFER_BYTES) -> CleaningPlan | None:
    """What a cleaning of ``log_`` (a compacted ``Log``) would do now, or None when it is not due.

    ``max_map_bytes`` bounds the offset map: when the dirty segments hold more keys than fit, the
    cleaning stops after the segment that filled it, and the next one goes on from there."""
    config = log_.config
    segments = log_.segments
    first_uncleanable = min(segments[-1].base_offset, log_.last_stable_offset)
    if config.min_compaction_lag_ms > 0:
        for segment in segments[:-1]:
            if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    cleanable = []
    for segment, following in zip(segments, segments[1:], strict=False):
        if following.base_offset > first_uncleanable:
            break
        cleanable.append(segment)
    if not cleanable:
        return None
    end = segments[len(cleanable)].base_offset
    first_dirty = read_checkpoint(log_.directory)
    if not cleanable[0].base_offset <= first_dirty <= end:
        first_dirty = cleanable[0].base_offset  # a checkpoint from before a truncation or retention
    cleanable_bytes = sum(s.size for s in cleanable)
    dirty_bytes = sum(s.size for s in cleanable if s.base_offset >= first_dirty)
    if dirty_bytes == 0:
        return None
    if dirty_bytes < config.min_cleanable_dirty_ratio * cleanable_bytes and not _overdue(
        cleanable, first_dirty, now_ms, config.max_compaction_lag_ms
    ):
        return None
    sources = [
        SourceSegment(
            s.base_offset,
            s.next_offset,
            s.size,
            s.log_path,
            tuple(log_.aborted_txns_in_segment(s.base_offset)),
        )
        for s in cleanable
    ]
    # Every aborted transaction with records in the cleanable range, its marker there or later (possibly
    # in the active segment): what a read_committed fetch of the range would be told.
    aborted: dict[int, list[tuple[int, int]]] = {}
    for txn in log_.collect_aborted_transactions(cleanable[0].base_offset, end):
        aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    for ranges in aborted.values():
        ranges.sort()
    last_of_producer = {
        entry.producer_id: (entry.last_data_offset, entry.epoch)
        for entry in log_.producer_state.active_producers()
    }
    return CleaningPlan(
        directory=log_.directory,
        groups=_group(sources, config.segment_bytes),
        first_dirty=first_dirty,
        end=end,
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        aborted=aborted,
        last_of_producer=last_of_producer,
        dirty_bytes=dirty_bytes,
        cleanable_bytes=cleanable_bytes,
        segment_bytes=config.segment_bytes,
        max_map_bytes=max_map_bytes,
    )


def _overdue(cleanable: list, first_dirty: int, now_ms: int, max_lag_ms: int) -> bool:
    """Whether the oldest dirty record waited max.compaction.lag.ms (Kafka's rule: then the log is
    cleaned whatever its dirty ratio). The first dirty batch's first timestamp stands for it."""
    if max_lag_ms >= now_ms:
        return False  # the default (Long.MAX_VALUE): never
    for segment in cleanable:
        if segment.base_offset >= first_dirty and segment.size:
            for _position, header in segment.headers(0):
                first = header.first_timestamp
                return (header.max_timestamp if first is None else first) <= now_ms - max_lag_ms
    return False


def _group(sources: list[SourceSegment], segment_bytes: int) -> list[list[SourceSegment]]:
    """Consecutive segments that fit one segment together (Kafka's groupSegmentsBySize): compaction
    would otherwise leave ever more small segments behind."""
    groups: list[list[SourceSegment]] = []
    for source in sources:
        if groups:
            current = groups[-1]
            size = sum(s.size for s in current) + source.size
            span = source.next_offset - 1 - current[0].base_offset
            if size <= segment_bytes and span <= _MAX_RELATIVE_OFFSET:
                current.append(source)
                continue
        groups.append([source])
    return groups


def build(cleaning: CleaningPlan) -> CleaningResult:
    """Write the cleaned file of every group (step 2 of the module docstring; safe off the event loop)."""
    offset_map, groups, end = _offset_map(cleaning)
    result = CleaningResult(end)
    txn_has_batches: dict[int, bool] = {}  # producer id -> a batch of its open transaction stayed
    for group in groups:
        base = group[0].base_offset
        path = cleaning.directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
        kept_markers: set[int] = set()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for source in group:
                for header, view in _batches(source):
                    result.bytes_read += len(view)
                    kept = _clean_batch(cleaning, offset_map, txn_has_batches, header, view, result)
                    if kept is None:
                        continue
                    if header.is_control:
                        kept_markers.add(header.base_offset)
                    written = memoryview(kept)
                    while written:
                        written = written[os.write(fd, written) :]
                    result.bytes_written += len(kept)
            os.fsync(fd)
        finally:
            os.close(fd)
        aborted = [txn for source in group for txn in source.aborted if txn.last_offset in kept_markers]
        result.groups.append(CleanedGroup(group, path, aborted))
    return result


def _offset_map(cleaning: CleaningPlan) -> tuple[dict[bytes, int], list[list[SourceSegment]], int]:
    """Each key's last offset in the dirty segments, aborted records and markers left out; with the
    groups to clean and where the cleaning ends. When the map outgrows ``max_map_bytes`` it is finished
    for the segment at hand and the cleaning ends after that segment (a key's later offset that lies
    beyond the end is still a later record: what it makes obsolete is obsolete)."""
    offsets: dict[bytes, int] = {}
    used = 0
    sources = [source for group in cleaning.groups for source in group]
    for i, source in enumerate(sources):
        if source.base_offset < cleaning.first_dirty:
            continue
        for header, view in _batches(source):
            if header.is_control or _is_aborted(cleaning, header):
                continue
            for record in decode_record_objects(header, view):
                key = record.key
                if key is not None:
                    if key not in offsets:
                        used += len(key) + MAP_ENTRY_OVERHEAD
                    offsets[key] = record.offset
        if used >= cleaning.max_map_bytes and i + 1 < len(sources):
            log.info(
                "%s: the offset map is full (%d keys); cleaning up to offset %d this time",
                cleaning.directory.name,
                len(offsets),
                sources[i + 1].base_offset,
            )
            return offsets, _group(sources[: i + 1], cleaning.segment_bytes), sources[i + 1].base_offset
    return offsets, cleaning.groups, cleaning.end


def _clean_batch(
    cleaning: CleaningPlan,
    offset_map: dict[bytes, int],
    txn_has_batches: dict[int, bool],
    header: BatchHeader,
    view: memoryview,
    result: CleaningResult,
) -> bytes | memoryview | None:
    """What stays of one batch: its own bytes, a rebuilt batch, or None."""
    producer_id = header.producer_id
    # KIP-534: a tombstone or an unneeded marker is only removed once its batch's delete horizon has
    # passed. The horizon is set (now + delete.retention.ms) by the first cleaning that finds them, so
    # a delete stays readable that long after compaction met it, whatever timestamp the producer gave.
    horizon = header.delete_horizon_ms
    past_horizon = horizon is not None and horizon <= cleaning.now_ms
    new_horizon = cleaning.now_ms + cleaning.delete_retention_ms
    must_stay = _is_last_of_producer(cleaning, header) or header.last_offset + 1 == result.end
    if header.is_control:
        if txn_has_batches.pop(producer_id, False):
            return view  # its transaction still has records: the marker is needed
        if past_horizon and not must_stay:
            result.records_removed += header.record_count
            return None
        if horizon is None:
            return rebuild_batch(header, decode_record_objects(header, view), delete_horizon_ms=new_horizon)
        return view
    if header.is_transactional and _is_aborted(cleaning, header):
        retained = []
    else:
        retained = [
            record
            for record in decode_record_objects(header, view)
            if record.key is not None
            and offset_map.get(record.key, record.offset) <= record.offset
            and not (record.value is None and past_horizon)
        ]
    result.records_removed += header.record_count - len(retained)
    set_horizon = horizon is None and any(record.value is None for record in retained)
    if len(retained) == header.record_count and not set_horizon:
        kept: bytes | memoryview | None = view
    elif retained or must_stay:
        kept = rebuild_batch(header, retained, delete_horizon_ms=new_horizon if set_horizon else None)
    else:
        kept = None
    if kept is not None and header.is_transactional:
        txn_has_batches[producer_id] = True
    return kept


def _is_last_of_producer(cleaning: CleaningPlan, header: BatchHeader) -> bool:
    """Whether the batch holds what an active producer's state is rebuilt from after a recovery without
    a snapshot: its last data batch (the last sequence), or, when it has none since its epoch moved, the
    marker of that epoch (fencing needs it). Kafka's cleaner keeps these too."""
    last = cleaning.last_of_producer.get(header.producer_id)
    if last is None:
        return False
    data_offset, epoch = last
    if data_offset >= 0:
        return header.last_offset == data_offset
    return header.is_control and header.producer_epoch == epoch


def _is_aborted(cleaning: CleaningPlan, header: BatchHeader) -> bool:
    ranges = cleaning.aborted.get(header.producer_id)
    if not ranges or not header.is_transactional:
        return False
    i = bisect_right(ranges, (header.base_offset, 2**63)) - 1
    return i >= 0 and ranges[i][0] <= header.base_offset <= ranges[i][1]


def _batches(source: SourceSegment) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The batches of a sealed segment file, read through a descriptor of our own (an unlink under us
    leaves it readable). A sealed segment was complete when it rolled: a bad batch is bit rot."""
    fd = os.open(source.path, os.O_RDONLY)
    try:
        position = 0
        while position < source.size:
            chunk = os.pread(fd, min(_READ_CHUNK, source.size - position), position)
            batches, valid = records.scan_batches(chunk)
            if not batches:
                claimed = records.batch_size_at(chunk, 0)
                if claimed is None or claimed <= len(chunk) or position + claimed > source.size:
                    raise OSError(f"{source.path}: no valid batch at byte {position}")
                chunk = os.pread(fd, claimed, position)  # one batch bigger than a chunk
                batches, valid = records.scan_batches(chunk)
                if not batches:
                    raise OSError(f"{source.path}: no valid batch at byte {position}")
            yield from batches
            position += valid
    finally:
        os.close(fd)


def install(log_: Log, cleaning: CleaningPlan, result: CleaningResult) -> int:
    """Swap the cleaned groups into ``log_``; returns how many were installed. A group whose segments
    changed since the plan is dropped (its file deleted), and so is everything after it."""
    installed = 0
    for i, group in enumerate(result.groups):
        if not log_.replace_segments(group.sources, group.path, group.aborted):
            for rest in result.groups[i:]:
                rest.path.unlink(missing_ok=True)
            log.info("cleaning of %s stopped: its segments changed under it", cleaning.directory.name)
            return installed
        installed += 1
    write_checkpoint(cleaning.directory, result.end)
    return installed


def clean(log_: Log, now_ms: int, *, max_map_bytes: int = DEDUPE_BUFFER_BYTES) -> CleaningResult | None:
    """Plan, build and install in one go (tests and tools); None when no cleaning was due."""
    cleaning = plan(log_, now_ms, max_map_bytes=max_map_bytes)
    if cleaning is None:
        return None
    result = build(cleaning)
    install(log_, cleaning, result)
    return result
