"""The aborted-transaction index of one segment: Kafka's ``.txnindex`` file.

One entry per transaction whose ABORT marker was written into the segment, in marker order, each
34 bytes big-endian as in Kafka (``AbortedTxn``): ``version int16 (0), producer_id int64,
first_offset int64, last_offset int64 (the marker's offset), last_stable_offset int64`` (the
partition's LSO once this transaction completed). A read_committed Fetch answers with the entries
that overlap the fetched range, so consumers drop aborted records without the broker decoding them.

The index is rebuilt, not trusted, for the part of the log that producer-state recovery replays:
``Log`` truncates it to the replay start and re-appends what replay completes. A torn trailing entry
(a crash mid-write) is cut on load.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        """The 34-byte ``.txnindex`` entry."""
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The aborted transactions of one segment, in memory and in ``<base offset>.txnindex``.

    The file is created on the first entry (most segments never see an abort)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._entries: list[AbortedTxn] = []
        self._fd: int | None = None
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != _VERSION:
                log.warning(
                    "%s: entry at byte %d has version %d; cutting the index there", self.path, pos, version
                )
                whole = pos
                break
            self._entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):
            log.warning("%s: cutting a torn tail of %d bytes", self.path, len(data) - whole)
            os.truncate(self.path, whole)

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def append(self, txn: AbortedTxn) -> None:
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted txn ending at {txn.last_offset} is not after {self._entries[-1].last_offset}"
            )
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, txn.encode())
        self._entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound_offset)``, and whether the search is
        complete (an entry's LSO reached the upper bound: no later segment can add an overlap)."""
        found = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = [txn for txn in self._entries if txn.last_offset < offset]
        if len(keep) == len(self._entries):
            return
        self._entries = keep
        if self.path.exists():
            os.truncate(self.path, len(keep) * ENTRY_SIZE)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._entries = []
