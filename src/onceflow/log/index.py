"""Sparse offset and time indexes of one segment, in Kafka's ``.index`` / ``.timeindex`` file formats.

The entries live in memory (arrays, so a lookup is one bisect) and are written whole to disk at roll,
flush and close, with :func:`~onceflow.log.durable_file.write_atomically` so a crash leaves either the
old file or the new one (and, when written at flush, the file and the rename are fsynced). Kafka preallocates and mmaps these files; we do not need to, because a missing, short or
inconsistent index is rebuilt from the segment on open.

- ``.index``: entries of (relative offset int32, file position int32). An entry (o, p) says the batch
  starting at byte p ends at offset base + o.
- ``.timeindex``: entries of (timestamp int64, relative offset int32), timestamps strictly increasing.
  An entry (t, o) says t is the largest timestamp of any record up to offset base + o.
"""

from __future__ import annotations

import logging
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from onceflow.log.durable_file import write_atomically

log = logging.getLogger(__name__)

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_TIME_ENTRY = struct.Struct(">qi")
_LITTLE_ENDIAN = sys.byteorder == "little"


class OffsetIndex:
    """Relative last offset -> file position of the batch, one entry per ``index.interval.bytes``."""

    __slots__ = ("base_offset", "_offsets", "_positions")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._offsets = array("i")
        self._positions = array("i")

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._offsets and relative <= self._offsets[-1]:
            return  # an entry for this batch (or a later one) exists already
        self._offsets.append(relative)
        self._positions.append(position)

    def last_entry(self) -> tuple[int, int] | None:
        """``(absolute offset, position)`` of the last entry, or None when empty."""
        if not self._offsets:
            return None
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def lookup(self, offset: int) -> int:
        """A position from which a forward scan finds the batch holding ``offset``.

        That is the position of the last entry whose offset is <= ``offset`` (every batch before it ends
        earlier), or 0.
        """
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        return self._positions[i] if i >= 0 else 0

    def position_floor(self, position: int) -> int:
        """The largest indexed batch start <= ``position`` (0 when none)."""
        i = bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries for batches starting at or after ``position``."""
        keep = bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]

    def to_bytes(self) -> bytes:
        pairs = array("i", bytes(OFFSET_ENTRY_SIZE * len(self._offsets)))
        pairs[0::2] = self._offsets
        pairs[1::2] = self._positions
        if _LITTLE_ENDIAN:
            pairs.byteswap()
        return pairs.tobytes()

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, segment_size: int) -> OffsetIndex | None:
        """Parse an index file; None when it is torn or its entries are not increasing and in range."""
        if len(data) % OFFSET_ENTRY_SIZE:
            return None
        pairs = array("i")
        pairs.frombytes(data)
        if _LITTLE_ENDIAN:
            pairs.byteswap()
        index = cls(base_offset)
        index._offsets = pairs[0::2]
        index._positions = pairs[1::2]
        if not _strictly_increasing(index._offsets) or not _strictly_increasing(index._positions):
            return None
        if index._offsets and (index._offsets[0] < 0 or index._positions[0] < 0):
            return None
        if index._positions and index._positions[-1] >= segment_size:
            return None
        return index

    def write(self, path: Path, *, fsync: bool = False) -> None:
        write_atomically(path, self.to_bytes(), durable=fsync)


class TimeIndex:
    """Largest timestamp so far -> relative offset, appended only when the timestamp grows."""

    __slots__ = ("base_offset", "_timestamps", "_offsets")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._offsets = array("i")

    def __len__(self) -> int:
        return len(self._timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        relative = offset - self.base_offset
        if self._timestamps and (timestamp <= self._timestamps[-1] or relative < self._offsets[-1]):
            return
        self._timestamps.append(timestamp)
        self._offsets.append(relative)

    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, absolute offset)`` of the last entry, or None when empty."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def offset_before(self, timestamp: int) -> int | None:
        """The offset of the last entry with a timestamp < ``timestamp``: every record up to it is older."""
        i = bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset + self._offsets[i] if i >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset``."""
        keep = bisect_left(self._offsets, offset - self.base_offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]

    def to_bytes(self) -> bytes:
        return b"".join(_TIME_ENTRY.pack(t, o) for t, o in zip(self._timestamps, self._offsets, strict=True))

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes) -> TimeIndex | None:
        if len(data) % TIME_ENTRY_SIZE:
            return None
        index = cls(base_offset)
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            index._timestamps.append(timestamp)
            index._offsets.append(relative)
        if not _strictly_increasing(index._timestamps) or not _non_decreasing(index._offsets):
            return None
        if index._offsets and index._offsets[0] < 0:
            return None
        return index

    def write(self, path: Path, *, fsync: bool = False) -> None:
        write_atomically(path, self.to_bytes(), durable=fsync)


def _strictly_increasing(values: array) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


def _non_decreasing(values: array) -> bool:
    return all(a <= b for a, b in zip(values, values[1:], strict=False))


def read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
