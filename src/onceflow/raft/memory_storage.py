"""Storage in memory, for the simulator: the same contract as the file storage, plus ``crash``,
which keeps only what a real disk would still hold after ``kill -9`` or a power cut.

What survives a crash: the election state, snapshots and log-start moves always (they are durable
when written); the log as of the last ``flush``, and, when the crash is a ``kill -9`` rather than a
power cut, everything written (the page cache survives the process). A power cut may also keep a
prefix of what was written after the last flush: the disk wrote some of it.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence

from onceflow.raft.errors import QuorumViolation
from onceflow.raft.records import Batch, OffsetAndEpoch
from onceflow.raft.storage import ElectionState, EpochCache, RaftStorage


class MemoryStorage(RaftStorage):
    def __init__(self) -> None:
        self.epochs = EpochCache()
        self._election: ElectionState | None = None
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        # The log as the disk holds it: _durable[:_synced] equals _batches[:_synced].
        self._durable: list[Batch] = []
        self._durable_start = 0
        self._synced = 0
        self.election_writes = 0
        self.flushes = 0
        self.ignore_flush = False  # a broken disk (tests check the simulator notices)

    # --- quorum state ---

    def read_election(self) -> ElectionState | None:
        return self._election

    def write_election(self, election: ElectionState) -> None:
        self._election = election
        self.election_writes += 1

    # --- log ---

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start

    def append(self, batches: Sequence[Batch]) -> None:
        self._record_append(batches)
        for batch in batches:
            self._batches.append(batch)
            self._bases.append(batch.base_offset)

    def flush(self) -> None:
        if self.ignore_flush:
            return
        self.flushes += 1
        self._sync()

    def _sync_all(self) -> None:
        """A durable change of the log start: the disk holds the log as it now is."""
        self._durable = list(self._batches)
        self._durable_start = self._start
        self._synced = len(self._batches)

    def _sync(self) -> None:
        del self._durable[self._synced :]
        self._durable.extend(self._batches[self._synced :])
        self._durable_start = self._start
        self._synced = len(self._batches)

    def read(self, offset: int, max_bytes: int, end_offset: int | None = None) -> list[Batch]:
        i = bisect_right(self._bases, offset) - 1
        if i < 0 or offset >= self.log_end_offset:
            return []
        out: list[Batch] = []
        size = 0
        for batch in self._batches[i:]:
            if end_offset is not None and batch.next_offset > end_offset:
                break
            size += batch.size_in_bytes()
            if out and size > max_bytes:
                break
            out.append(batch)
        return out

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        # The batch holding ``offset`` goes whole, as Log.truncate_to does.
        keep = max(bisect_right(self._bases, offset) - 1, 0)
        del self._batches[keep:]
        del self._bases[keep:]
        self._synced = min(self._synced, keep)
        self.epochs.truncate_from_end(self.log_end_offset)

    # --- snapshots ---

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots, key=lambda s: s.offset)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots or snapshot_id.offset > self.log_end_offset:
            raise QuorumViolation(f"cannot start the log at {snapshot_id}: no such snapshot within the log")
        for old in [s for s in self._snapshots if s.offset < snapshot_id.offset]:
            del self._snapshots[old]
        if snapshot_id.offset <= self._start:
            return
        drop = bisect_right(self._bases, snapshot_id.offset - 1)  # batches starting below the new start
        if drop and self._batches[drop - 1].next_offset > snapshot_id.offset:
            raise QuorumViolation(f"snapshot {snapshot_id} ends inside a batch")
        del self._batches[:drop]
        del self._bases[:drop]
        self._start = snapshot_id.offset
        self.epochs.truncate_from_start(snapshot_id)
        self._sync_all()

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots:
            raise QuorumViolation(f"cannot reset the log to {snapshot_id}: no such snapshot")
        self._batches.clear()
        self._bases.clear()
        self._start = snapshot_id.offset
        self.epochs.reset(snapshot_id)
        for old in [s for s in self._snapshots if s.offset < snapshot_id.offset]:
            del self._snapshots[old]
        self._sync_all()

    # --- crashes (simulator only) ---

    def crash(self, rng: random.Random, *, power_cut: bool) -> MemoryStorage:
        """The storage a restarted process finds (see the module docstring). ``self`` is left as
        the dead process's view and must not be used again."""
        survivor = type(self)()
        survivor.ignore_flush = self.ignore_flush
        survivor._election = self._election
        survivor._snapshots = dict(self._snapshots)
        if power_cut:
            if rng.random() < 0.5:
                batches = list(self._durable)  # nothing written since the last flush reached the disk
            else:  # some of it did: a prefix of what was written after the flush
                extra = rng.randint(0, len(self._batches) - self._synced)
                batches = self._durable[: self._synced] + self._batches[self._synced : self._synced + extra]
            start = self._durable_start
        else:
            batches = list(self._batches)
            start = self._start
        base = OffsetAndEpoch(start, 0)
        for snapshot_id in survivor._snapshots:
            if snapshot_id.offset == start:
                base = snapshot_id
        survivor._start = start
        survivor.epochs = EpochCache(base)
        survivor.append([b for b in batches if b.base_offset >= start])
        survivor.flush()
        survivor.flushes = 0
        return survivor

    def durably_holds(self, offset: int, epoch: int) -> bool:
        """Whether a power cut now would leave the entry at ``offset`` with ``epoch`` (or a
        snapshot covering it) on this disk (simulator checks)."""
        if any(s.offset > offset for s in self._snapshots):
            return True
        for batch in reversed(self._durable):
            if batch.base_offset <= offset:
                return offset < batch.next_offset and batch.epoch == epoch
        return False
