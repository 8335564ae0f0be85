"""What the core needs from durable storage, and the log rules every storage shares.

:class:`RaftStorage` is the interface (the file-backed ``file_storage`` and the simulator's
``memory_storage`` implement it): the quorum state (``quorum-state``: epoch, leader, vote, written
durably before any answer that depends on it goes out), the log of batches, and snapshots.

The log rules live here once, over an :class:`EpochCache` (Kafka's leader-epoch cache: where each
epoch starts): the end offset of an epoch, whether a follower's ``(fetch offset, last fetched
epoch)`` matches the log or diverges from it or lies below the log start (a snapshot is needed), and
how far a follower truncates on a diverging answer.

Durability contract: ``append`` and ``truncate_to`` may stay in memory until ``flush``; the core
flushes before it acknowledges anything (a follower before its next Fetch, a leader before it counts
its own entries). ``write_election``, ``write_snapshot``, ``delete_before`` and ``reset_to_snapshot``
are durable when they return.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from onceflow.raft.errors import QuorumViolation
from onceflow.raft.records import Batch, OffsetAndEpoch

LOG_BEGINNING = OffsetAndEpoch(0, 0)


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The durable part of a node's quorum state (Kafka's ``quorum-state`` file): the epoch, the
    leader if one is known, and the candidate voted for in this epoch if any (a candidate votes for
    itself)."""

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voters: tuple[int, ...] = ()


class EpochCache:
    """``(epoch, start offset)`` of every epoch with entries in the log, ascending, above a base:
    ``(log start, epoch of the entry just below it)``, which is a snapshot's id when the log starts
    after one and ``(0, 0)`` for a log that starts at the beginning."""

    __slots__ = ("_epochs", "_starts", "base")

    def __init__(self, base: OffsetAndEpoch = LOG_BEGINNING) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.base = base

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def last_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else self.base.epoch

    def assign(self, epoch: int, start_offset: int) -> None:
        """Entries of ``epoch`` are appended from ``start_offset``."""
        if self._epochs and epoch == self._epochs[-1]:
            return
        if epoch < self.last_epoch:
            raise QuorumViolation(
                f"appending epoch {epoch} at offset {start_offset} after epoch {self.last_epoch}: epochs "
                "in a log never go down"
            )
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs that start at or after ``end_offset`` (the log was truncated there)."""
        while self._starts and self._starts[-1] >= end_offset:
            self._starts.pop()
            self._epochs.pop()

    def truncate_from_start(self, base: OffsetAndEpoch) -> None:
        """The log now starts at ``base.offset`` (after a snapshot whose id is ``base``)."""
        self.base = base
        keep = bisect_right(self._starts, base.offset) - 1
        if keep > 0:
            del self._epochs[:keep]
            del self._starts[:keep]
        if self._starts and self._starts[0] < base.offset:
            self._starts[0] = base.offset

    def reset(self, base: OffsetAndEpoch) -> None:
        self._epochs.clear()
        self._starts.clear()
        self.base = base

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> OffsetAndEpoch:
        """The largest epoch in the log not above ``epoch``, with the offset where it ends (the start
        of the next epoch, or the log end). Below every epoch in the log: the base."""
        i = bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return self.base
        end = self._starts[i + 1] if i + 1 < len(self._starts) else log_end_offset
        return OffsetAndEpoch(end, self._epochs[i])

    def epoch_before(self, offset: int) -> int:
        """The epoch of the entry at ``offset - 1`` (the epoch of a snapshot ending at ``offset``)."""
        i = bisect_right(self._starts, offset - 1) - 1
        return self._epochs[i] if i >= 0 else self.base.epoch


class FetchCheck(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


class RaftStorage(ABC):
    """Durable state of one node. Subclasses keep ``self.epochs`` (an :class:`EpochCache`) in step
    with their log: ``_record_append`` on append, and the truncation calls below."""

    epochs: EpochCache

    # --- quorum state ---

    @abstractmethod
    def read_election(self) -> ElectionState | None:
        """The last written election state, or None for a new node."""

    @abstractmethod
    def write_election(self, election: ElectionState) -> None:
        """Make ``election`` durable (before the node answers anything that depends on it)."""

    # --- log ---

    @property
    @abstractmethod
    def log_start_offset(self) -> int: ...

    @property
    @abstractmethod
    def log_end_offset(self) -> int: ...

    @abstractmethod
    def append(self, batches: Sequence[Batch]) -> None:
        """Add batches at the log end; the first must start at ``log_end_offset``."""

    @abstractmethod
    def flush(self) -> None:
        """Make every append and truncation so far durable."""

    @abstractmethod
    def read(self, offset: int, max_bytes: int, end_offset: int | None = None) -> list[Batch]:
        """Whole batches from the one starting at ``offset`` (the first one even if larger than
        ``max_bytes``), stopping before any batch that ends at or beyond ``end_offset``."""

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove everything from ``offset`` on."""

    # --- snapshots ---

    @abstractmethod
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """The stored snapshots' ids, oldest first."""

    @abstractmethod
    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None: ...

    @abstractmethod
    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a whole snapshot durably (written aside, then renamed into place)."""

    @abstractmethod
    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Make ``snapshot_id.offset`` the log start (it must be a stored snapshot's, at or below the
        log end): entries below it go, and so do older snapshots."""

    @abstractmethod
    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Empty the log and start it at the stored snapshot ``snapshot_id`` (a follower that
        fetched a snapshot beyond its log)."""

    # --- rules shared by every storage ---

    @property
    def last_fetched_epoch(self) -> int:
        return self.epochs.last_epoch

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log_end_offset, self.epochs.last_epoch)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self.snapshot_ids()
        return ids[-1] if ids else None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self.epochs.end_offset_for_epoch(epoch, self.log_end_offset)

    def epoch_before(self, offset: int) -> int:
        return self.epochs.epoch_before(offset)

    def check_fetch(
        self, fetch_offset: int, last_fetched_epoch: int
    ) -> tuple[FetchCheck, OffsetAndEpoch | None]:
        """Whether a follower whose log ends at ``(fetch_offset, last_fetched_epoch)`` matches this
        log (VALID), must truncate first (DIVERGING, to the returned end offset and epoch), or needs a
        snapshot (SNAPSHOT, the latest one's id) because what it lacks is below the log start."""
        start = self.log_start_offset
        latest = self.latest_snapshot_id()
        if fetch_offset == 0 and latest is not None and latest.offset > 0:
            return FetchCheck.SNAPSHOT, latest  # an empty follower: cheaper from the snapshot
        if start == 0 and fetch_offset == 0:
            return FetchCheck.VALID, None
        base = self.epochs.base
        if start > 0 and (
            fetch_offset < start
            or (fetch_offset == start and last_fetched_epoch != base.epoch)
            or last_fetched_epoch < base.epoch
        ):
            if latest is None:
                raise QuorumViolation(f"the log starts at {start} but no snapshot is stored")
            return FetchCheck.SNAPSHOT, latest
        end = self.end_offset_for_epoch(last_fetched_epoch)
        if end.epoch != last_fetched_epoch or end.offset < fetch_offset:
            return FetchCheck.DIVERGING, end
        return FetchCheck.VALID, None

    def truncate_to_end_offset(self, diverging: OffsetAndEpoch) -> int:
        """Truncate where the leader's diverging answer says this log stops matching; returns the new
        log end (Kafka's ``truncateToEndOffset``)."""
        if diverging.epoch == 0:
            offset = min(diverging.offset, self.log_end_offset)
        else:
            local = self.end_offset_for_epoch(diverging.epoch)
            offset = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
        if offset < self.log_start_offset:
            raise QuorumViolation(
                f"the leader asks for truncation to {offset}, below the log start {self.log_start_offset} "
                "(a snapshot of committed entries)"
            )
        self.truncate_to(offset)
        return self.log_end_offset

    def _record_append(self, batches: Sequence[Batch]) -> None:
        expected = self.log_end_offset
        for batch in batches:
            if batch.base_offset != expected:
                raise QuorumViolation(f"batch at offset {batch.base_offset} appended at log end {expected}")
            self.epochs.assign(batch.epoch, batch.base_offset)
            expected = batch.next_offset
