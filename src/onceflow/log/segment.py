"""One log segment: ``<base offset:020d>.log`` plus its offset and time indexes.

The ``.log`` file is the producers' batches back to back, exactly as they came (with the offsets the
log assigned). The file descriptor stays open for the segment's life: appends are one ``os.write``
per append call on an ``O_APPEND`` descriptor, reads are ``os.pread``. Nothing is cached but the two
sparse indexes and a few numbers (next offset, largest timestamp, last batch position). Big appends
write into disk space reserved ahead of the end without growing the file (``preallocate``), given
back when the segment rolls or closes.

When a segment is sealed (rolled) or the log is closed, each index gets a final entry for the last
batch. That makes an index self-checking on open: its last offset entry must point at a batch that
ends exactly at the end of the file. An index that fails the check is rebuilt from the data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from onceflow.log import preallocate
from onceflow.log.index import OffsetIndex, TimeIndex, read_file
from onceflow.protocol import records
from onceflow.protocol.errors import KafkaStorageError
from onceflow.protocol.records import BATCH_HEADER_SIZE, BatchHeader

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
NO_TIMESTAMP = -1
_HEADER_CHUNK = 16 * 1024  # header walks read this much at a time (index.interval.bytes is 4 KiB)
_SCAN_CHUNK = 8 * 1024 * 1024  # recovery reads this much at a time
_MAX_RELATIVE_OFFSET = 2**31 - 1
# Appends of at least this much write into disk space reserved ahead of them (see preallocate), in
# steps of RESERVE_AHEAD; smaller appends gain little from it and would pay a syscall for it.
RESERVE_MIN_APPEND = 64 * 1024
RESERVE_AHEAD = 8 * 1024 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment's files, indexes and bookkeeping. Not thread-safe: the Log serialises access."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self.offset_index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        # Disk reserved past the end. A reservation left by a process that died before releasing it
        # counts too, so that the next roll or close gives it back (the last block's rounding doesn't).
        allocated = stat.st_blocks * 512
        self._reserved_end = allocated if allocated - self.size >= RESERVE_MIN_APPEND else self.size
        self._can_reserve = True
        self.next_offset = base_offset  # one past the last offset stored here
        self.max_timestamp = NO_TIMESTAMP
        self.created_ms = now_ms  # wall-clock start of this segment's life, for segment.ms
        self._last_batch_position = -1
        self._bytes_since_index_entry = 0
        self._write_failure: OSError | None = None  # set when a failed write could not be cut off

    # --- opening ---

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, *, recover: bool
    ) -> LogSegment:
        """Open (or create) a segment. With ``recover`` its data is CRC-scanned and a torn tail cut off;
        otherwise the saved indexes are used when they check out, and rebuilt by a scan when not."""
        segment = cls(directory, base_offset, index_interval_bytes, now_ms)
        if recover or not segment._load_indexes():
            segment.recover()
        return segment

    def _load_indexes(self) -> bool:
        """Use the saved indexes if they are consistent with the data; False means rebuild."""
        if self.size == 0:
            return True
        offset_data = read_file(self.index_path)
        time_data = read_file(self.time_index_path)
        if offset_data is None or time_data is None:
            log.info("segment %s: index missing, rebuilding", self.log_path)
            return False
        offset_index = OffsetIndex.from_bytes(self.base_offset, offset_data, self.size)
        time_index = TimeIndex.from_bytes(self.base_offset, time_data)
        last = offset_index.last_entry() if offset_index else None
        time_last = time_index.last_entry() if time_index else None
        if last is None or time_last is None:
            log.warning("segment %s: index empty or corrupt, rebuilding", self.log_path)
            return False
        last_offset, position = last
        header_bytes = os.pread(self._fd, BATCH_HEADER_SIZE, position)
        if len(header_bytes) < BATCH_HEADER_SIZE:
            return False
        header = records.read_header(header_bytes)
        if (
            header.last_offset != last_offset
            or position + header.size != self.size
            or time_last[1] > last_offset
        ):
            log.warning("segment %s: index does not match the data, rebuilding", self.log_path)
            return False
        self.offset_index, self.time_index = offset_index, time_index
        self.next_offset = last_offset + 1
        self.max_timestamp = time_last[0]
        self._last_batch_position = position
        return True

    def recover(self) -> int:
        """Rebuild the indexes from a CRC-checked scan and cut off anything after the last good batch.

        Returns the number of bytes removed. Every batch's offsets must increase; a batch that goes
        backwards is treated as corruption like a bad CRC.
        """
        self.offset_index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._last_batch_position = -1
        self._bytes_since_index_entry = 0
        valid_end = 0
        for position, header, _view in self.scan():
            if (
                header.base_offset < self.next_offset
                or header.last_offset - self.base_offset > _MAX_RELATIVE_OFFSET
            ):
                break
            self._index_batch(position, header.last_offset, header.max_timestamp, header.size)
            valid_end = position + header.size
        removed = self.size - valid_end
        if removed:
            log.warning(
                "segment %s: truncating %d bytes of torn or corrupt data at byte %d (offsets end at %d)",
                self.log_path,
                removed,
                valid_end,
                self.next_offset,
            )
            os.ftruncate(self._fd, valid_end)  # also frees any reservation past the cut
            self.size = self._reserved_end = valid_end
        self.write_indexes()  # so the next open can trust them
        return removed

    # --- writing ---

    def append(self, data, batches: list[tuple[int, int, int]]) -> None:
        """Write ``data`` (whole batches) with one write call; ``batches`` gives each one's
        ``(last offset, max timestamp, size)`` for the indexes."""
        if self._write_failure is not None:
            raise KafkaStorageError(
                f"segment {self.log_path} refuses appends: a failed write could not be undone "
                f"({self._write_failure})"
            )
        view = memoryview(data)
        if (
            len(view) >= RESERVE_MIN_APPEND
            and self._can_reserve
            and self.size + len(view) > self._reserved_end
        ):
            self._reserve(self.size + len(view) + RESERVE_AHEAD)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            self._undo_partial_write()
            raise
        position = self.size
        for last_offset, max_timestamp, size in batches:
            self._index_batch(position, last_offset, max_timestamp, size)
            position += size
        self.size = position

    def _undo_partial_write(self) -> None:
        """Cut off what a failed write (a full disk) managed to append. Left there, the next append would
        land after it, away from where the indexes put it, and recovery would stop at this torn batch and
        drop every acknowledged one written after it. If even the cut fails, the segment takes no more
        appends until the broker restarts and recovery cuts the tail (Kafka takes the log dir offline)."""
        try:
            os.ftruncate(self._fd, self.size)  # also frees any reservation past the end
        except OSError as exc:
            log.error("segment %s: could not cut a failed write's bytes: %s", self.log_path, exc)
            self._write_failure = exc
        else:
            self._reserved_end = self.size

    def _reserve(self, end: int) -> None:
        reserved = preallocate.reserve(self._fd, self.size, end - self.size)
        if reserved is None:
            self._can_reserve = False
        elif reserved:
            self._reserved_end = end

    def release_reserved(self) -> None:
        """Give back the disk reserved past the end: the segment has stopped growing."""
        if self._reserved_end > self.size and self._fd >= 0:
            preallocate.release(self._fd, self.size)
        self._reserved_end = self.size

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        # Kafka's LogSegment.append rule: an entry once more than index.interval.bytes were written since
        # the last one, for the batch about to start at ``position``.
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, last_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self._last_batch_position = position
        self.next_offset = last_offset + 1

    def seal_indexes(self) -> None:
        """Add the final entries that make the indexes self-checking (see the module docstring)."""
        if self._last_batch_position >= 0:
            self.offset_index.append(self.next_offset - 1, self._last_batch_position)
            self.time_index.maybe_append(self.max_timestamp, self.next_offset - 1)

    def write_indexes(self, *, fsync: bool = False) -> None:
        self.seal_indexes()
        # Time index first: the offset index is the one checked on open, so a crash between the two
        # writes leaves a stale offset index, which is caught and both are rebuilt.
        self.time_index.write(self.time_index_path, fsync=fsync)
        self.offset_index.write(self.index_path, fsync=fsync)

    def flush(self, *, indexes: bool = True) -> None:
        """fsync the data, and with ``indexes`` write the indexes too (fsynced). Without them the saved
        indexes may lag the data: a clean shutdown writes them (``Log.close`` flushes with them), and
        after a crash the active segment is rescanned anyway and a stale sealed index fails its check."""
        os.fsync(self._fd)
        if indexes:
            self.write_indexes(fsync=True)

    def truncate_to(self, offset: int) -> None:
        """Remove the batch holding ``offset`` and everything after it (Kafka cuts at batch starts)."""
        found = self.find_batch(offset)
        if found is None:
            return
        position, _header = found
        os.ftruncate(self._fd, position)  # also frees any reservation past the cut
        self.size = self._reserved_end = position
        self.recover()

    # --- reading ---

    def is_full_for(self, size: int, segment_bytes: int, segment_index_bytes: int, last_offset: int) -> bool:
        """Whether appending ``size`` more bytes ending at ``last_offset`` must go to a new segment."""
        if self.size == 0:
            return False
        return (
            self.size + size > segment_bytes
            or len(self.offset_index) >= segment_index_bytes // 8
            or last_offset - self.base_offset > _MAX_RELATIVE_OFFSET
        )

    def headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` (a batch start) to ``end``."""
        end = self.size if end is None else end
        buf = b""
        buf_start = position
        while position + BATCH_HEADER_SIZE <= end:
            relative = position - buf_start
            if relative + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(_HEADER_CHUNK, end - position), position)
                buf_start, relative = position, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            header = records.read_header(buf, relative)
            if header.size < BATCH_HEADER_SIZE:
                # Only bit rot inside a sealed segment gets here; never loop on it.
                raise KafkaStorageError(f"segment {self.log_path}: corrupt batch header at byte {position}")
            yield position, header
            position += header.size

    def scan(self, position: int = 0) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """``(position, header, whole batch)`` of every CRC-valid batch from ``position``, in chunks,
        stopping at the first torn or invalid batch. Recovery and producer-state replay use this."""
        end = self.size
        while position < end:
            chunk = os.pread(self._fd, min(_SCAN_CHUNK, end - position), position)
            batches, valid = records.scan_batches(chunk)
            for header, view in batches:
                yield position, header, view
                position += len(view)
            if valid == len(chunk):
                continue
            claimed = records.batch_size_at(chunk, valid)
            cut_by_chunk = claimed is not None and claimed > len(chunk) - valid and position + claimed <= end
            if not cut_by_chunk:
                return  # torn or corrupt: the caller sees where the good batches ended
            if claimed > _SCAN_CHUNK:
                big = os.pread(self._fd, claimed, position)
                batches, valid = records.scan_batches(big)
                if not batches:
                    return
                yield position, batches[0][0], batches[0][1]
                position += valid

    def find_batch(self, offset: int, position: int = 0) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``, searching from the index's best start."""
        start = max(position, self.offset_index.lookup(offset))
        for batch_position, header in self.headers(start):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> bytes | None:
        """Whole batches from the one holding ``offset``; None when this segment has none at or after it."""
        found = self.find_batch(offset)
        if found is None:
            return None
        start, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return b""
        end = self.size
        if max_offset is not None and max_offset < self.next_offset:
            stop = self.find_batch(max_offset, start)
            if stop is not None:
                stop_position, stop_header = stop
                end = (
                    stop_position
                    if stop_header.base_offset >= max_offset
                    else stop_position + stop_header.size
                )
        limit = start + max_bytes
        if end > limit:
            end = self._last_boundary_within(start, limit, end)
            if end == start:
                if not min_one_batch:
                    return b""
                end = start + first.size
        return self._pread_exact(end - start, start)

    def _last_boundary_within(self, start: int, limit: int, end: int) -> int:
        """The last batch boundary <= ``limit`` at or after ``start``."""
        position = max(start, self.offset_index.position_floor(limit))
        for batch_position, header in self.headers(position, end):
            if batch_position + header.size > limit:
                return batch_position
        return end

    def _pread_exact(self, size: int, position: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) == size:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def find_timestamp(self, timestamp: int, min_offset: int = 0) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``min_offset`` (the log start) with a
        timestamp >= ``timestamp``, or None.

        Uncompressed batches are searched record by record; for a compressed batch the answer is the
        batch's base offset (at least ``min_offset``) with its first timestamp when that qualifies,
        else its max timestamp.
        """
        if self.max_timestamp < timestamp:
            return None
        older_through = self.time_index.offset_before(timestamp)
        start = 0 if older_through is None else self.offset_index.lookup(older_through + 1)
        for position, header in self.headers(start):
            if header.max_timestamp < timestamp or header.last_offset < min_offset:
                continue
            first = max(header.base_offset, min_offset)
            if header.timestamp_type == 1:
                return first, header.max_timestamp
            if header.compression:
                first_timestamp = header.first_timestamp
                if first_timestamp is not None and first_timestamp >= timestamp:
                    return first, first_timestamp
                return first, header.max_timestamp
            batch = self._pread_exact(header.size, position)
            for record_offset, record_timestamp in records.iter_record_timestamps(batch):
                if record_timestamp >= timestamp and record_offset >= min_offset:
                    return record_offset, record_timestamp
        return None

    # --- lifecycle ---

    def close(self) -> None:
        if self._fd >= 0:
            self.release_reserved()
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Close and remove the files; the .log goes first so a crash midway leaves no half segment."""
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"
