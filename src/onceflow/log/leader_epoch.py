"""Which leader epoch wrote which offsets of a partition: Kafka's ``LeaderEpochFileCache`` (KIP-101).

Every batch a leader appends carries the leader's epoch (``partitionLeaderEpoch`` in its header), and
the log keeps, for each epoch, the first offset written in it: ``(epoch, start_offset)`` entries with
both strictly growing. The end of an epoch is the start of the next one (or the log end for the last),
which is what OffsetsForLeaderEpoch answers and what a follower compares to find where its log parted
from the leader's (KIP-101, with KIP-279's follow-up round when the leader names an epoch the follower
never saw).

The entries live in ``leader-epoch-checkpoint`` in the partition directory (``checkpoint_file``'s
format). Rules, as Kafka's:

- ``assign(epoch, start)`` adds an entry when the epoch is new or starts earlier than recorded; entries
  it contradicts (a later or equal epoch, or a start at or after the new one) are dropped first. The
  file is rewritten (durably) before the call returns, so it never lacks an entry whose batches are
  in the log.
- ``truncate_from_end(end)`` drops the entries starting at or after ``end`` (the log was truncated to
  it); ``truncate_from_start(start)`` drops the entries wholly below the log start and moves the
  last of them up to ``start`` (retention or DeleteRecords moved the start).
- ``end_offset_for(epoch, log_end)``: the largest known epoch at or below ``epoch`` and the offset
  where it ended; ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when ``epoch`` is undefined or above
  every known one, and ``(epoch, first known start)`` when it is below them all (those offsets are
  gone; the follower restarts from what remains).

Because the log is truncated and retained without this file's help, the log brings the cache back in
line with its own range each time it opens (stale entries after a crash are therefore harmless). A
file that cannot be read is rebuilt from the epochs in the stored batches' headers.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from onceflow.log.checkpoint_file import CorruptCheckpoint, read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1  # Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # ... and UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch ``epoch`` wrote its first batch at ``start_offset``."""

    epoch: int
    start_offset: int


def _parse(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError("expected 'epoch start_offset'")
    return EpochEntry(int(fields[0]), int(fields[1]))


class LeaderEpochCache:
    """The epoch entries of one partition, oldest first, and their checkpoint file (None: memory only)."""

    def __init__(self, path: Path | None, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []  # the entries' epochs, for bisect
        for entry in entries:
            self._assign(entry)

    @classmethod
    def load(
        cls, directory: Path, rebuild: Callable[[], Iterable[tuple[int, int]]] | None = None
    ) -> LeaderEpochCache:
        """The cache in ``directory``'s checkpoint (empty without one). A damaged file is replaced by
        the entries ``rebuild`` derives from the log, ``(epoch, base offset)`` of every batch."""
        path = Path(directory) / CHECKPOINT_FILE
        try:
            entries = read_checkpoint(path, CHECKPOINT_VERSION, _parse)
        except CorruptCheckpoint as exc:
            log.error("%s; rebuilding the leader epochs from the log's batches", exc)
            cache = cls(path)
            for epoch, offset in rebuild() if rebuild is not None else ():
                if epoch >= 0:
                    cache._assign(EpochEntry(epoch, offset))
            cache._write()
            return cache
        return cls(path, entries or ())

    # -- queries ---------------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch that wrote (or, for a new leader, will write) to this log."""
        return self._epochs[-1] if self._epochs else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest known epoch below ``epoch``."""
        i = bisect_left(self._epochs, epoch)
        return self._epochs[i - 1] if i > 0 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (the last entry starting at or before it), if known."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetsForLeaderEpoch (see the module docstring)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            # The epoch being written: it ends at the log end (a consumer checking its position asks this).
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._epochs[higher - 1], self._entries[higher].start_offset

    # -- changes ---------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True (and the file rewritten) if it changed."""
        if not self._assign(EpochEntry(epoch, start_offset)):
            return False
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drop the entries starting at or after ``end_offset``; returns them."""
        removed = []
        while self._entries and self._entries[-1].start_offset >= end_offset:
            removed.append(self._entries.pop())
            self._epochs.pop()
        if removed:
            log.debug("leader epochs %s dropped at end offset %d (%s)", removed, end_offset, self.path)
            self._write()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Drop the entries that start at or below ``start_offset``, keeping the last of them moved up to
        start there (its epoch still wrote the first offsets that remain)."""
        below = bisect_right([e.start_offset for e in self._entries], start_offset)
        if below == 0 or (below == 1 and self._entries[0].start_offset == start_offset):
            return []
        removed = self._entries[:below]
        kept = EpochEntry(removed[-1].epoch, start_offset)
        self._entries[:below] = [kept]
        self._epochs[:below] = [kept.epoch]
        self._write()
        return removed

    def clear(self) -> None:
        """Forget every entry (the log was emptied)."""
        if self._entries or (self.path is not None and self.path.exists()):
            self._entries, self._epochs = [], []
            self._write()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry} for {self.path}")
        latest = self._entries[-1] if self._entries else None
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        removed = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
            self._epochs.pop()
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning("leader epoch %s replaced the conflicting entries %s (%s)", entry, removed, self.path)
        self._entries.append(entry)
        self._epochs.append(entry.epoch)
        return True

    def _write(self) -> None:
        if self.path is None:
            return
        lines = [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_checkpoint(self.path, CHECKPOINT_VERSION, lines)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[(e.epoch, e.start_offset) for e in self._entries]})"
