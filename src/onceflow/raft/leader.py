"""What a leader knows of its epoch: every replica's progress, the high watermark, and its timers.

The high watermark is the largest offset that a majority of voters (the leader counts itself, once
its own entries are flushed) have in their logs, as their Fetch offsets say, and it only moves once
that offset is past the leader's first entry of its own epoch (its LeaderChange record, at
``epoch_start_offset``): a leader may never commit an entry of an earlier epoch by counting copies,
only by committing one of its own after it. It never moves backwards within the epoch.

Check quorum: a leader that has not heard a Fetch from a majority of voters within 1.5 fetch
timeouts resigns (it may be cut off from a majority that has elected someone else).
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.raft.config import CHECK_QUORUM_TIMEOUT_FACTOR, OBSERVER_SESSION_TIMEOUT_MS, RaftConfig
from onceflow.raft.messages import ReplicaDescription


@dataclass(slots=True)
class ReplicaProgress:
    replica_id: int
    end_offset: int | None = None  # from its last Fetch (the leader's own: its flushed log end)
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1  # the leader's log end when that Fetch was answered
    acknowledged: bool = False  # it has fetched in, or answered BeginQuorumEpoch for, this epoch
    high_watermark_sent: int = -1  # the high watermark in the last Fetch answer it got

    def describe(self) -> ReplicaDescription:
        end = -1 if self.end_offset is None else self.end_offset
        return ReplicaDescription(self.replica_id, end, self.last_fetch_ms, self.last_caught_up_ms)


class LeaderProgress:
    def __init__(
        self,
        *,
        local_id: int,
        epoch: int,
        epoch_start_offset: int,
        voters: tuple[int, ...],
        granting_voters: frozenset[int],
        config: RaftConfig,
        now_ms: int,
    ) -> None:
        self.local_id = local_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = granting_voters
        self.voters = {v: ReplicaProgress(v, acknowledged=v == local_id) for v in voters}
        self.observers: dict[int, ReplicaProgress] = {}
        self.high_watermark: int | None = None
        self._check_quorum_timeout_ms = int(config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        self.check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms
        self._fetched_voters: set[int] = set()
        # BeginQuorumEpoch goes to every other voter at once, then every half fetch timeout to the
        # voters that have not fetched within it.
        self.begin_quorum_interval_ms = max(config.fetch_timeout_ms // 2, 1)
        self.next_begin_quorum_ms = now_ms

    # --- progress and the high watermark ---

    def update_local_end(self, end_offset: int) -> bool:
        """The leader's own log is flushed up to ``end_offset``; True when the high watermark moved."""
        self.voters[self.local_id].end_offset = end_offset
        return self._maybe_advance()

    @property
    def local_end_offset(self) -> int:
        end = self.voters[self.local_id].end_offset
        return self.epoch_start_offset if end is None else end

    def update_replica(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A valid Fetch at ``fetch_offset`` (so the replica's log matches ours up to there); True
        when the high watermark moved."""
        progress = self.voters.get(replica_id)
        is_voter = progress is not None
        if progress is None:
            progress = self.observers.get(replica_id)
            if progress is None:
                progress = self.observers[replica_id] = ReplicaProgress(replica_id)
        leader_end = self.local_end_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif progress.last_fetch_leader_end > 0 and fetch_offset >= progress.last_fetch_leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end = leader_end
        progress.last_fetch_ms = max(progress.last_fetch_ms, now_ms)
        progress.end_offset = fetch_offset
        progress.acknowledged = True
        if is_voter:
            self.record_voter_contact(replica_id, now_ms)
            return self._maybe_advance()
        return False

    def _maybe_advance(self) -> bool:
        ends = sorted(
            (p.end_offset for p in self.voters.values() if p.end_offset is not None),
            reverse=True,
        )
        majority_index = len(self.voters) // 2
        if len(ends) <= majority_index:
            return False
        candidate = ends[majority_index]
        if candidate <= self.epoch_start_offset:
            return False  # nothing of this epoch is on a majority yet
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False  # never backwards (a replica's fetch offset can lag after a duplicate)
        self.high_watermark = candidate
        return True

    def acknowledge(self, voter_id: int) -> None:
        """``voter_id`` answered BeginQuorumEpoch: it knows this leader."""
        if voter_id in self.voters:
            self.voters[voter_id].acknowledged = True

    def note_high_watermark_sent(self, replica_id: int, high_watermark: int) -> None:
        progress = self.voters.get(replica_id) or self.observers.get(replica_id)
        if progress is not None:
            progress.high_watermark_sent = high_watermark

    def knows_high_watermark(self, replica_id: int) -> bool:
        """Whether ``replica_id``'s last Fetch answer carried the current high watermark."""
        progress = self.voters.get(replica_id) or self.observers.get(replica_id)
        hw = -1 if self.high_watermark is None else self.high_watermark
        return progress is None or progress.high_watermark_sent >= hw

    def voters_by_descending_end_offset(self) -> list[int]:
        """The other voters, most up to date first: the preferred successors when resigning."""
        others = [p for v, p in self.voters.items() if v != self.local_id]
        others.sort(key=lambda p: (-(p.end_offset if p.end_offset is not None else -1), p.replica_id))
        return [p.replica_id for p in others]

    # --- check quorum ---

    def record_voter_contact(self, voter_id: int, now_ms: int) -> None:
        """A Fetch or FetchSnapshot from ``voter_id``: once a majority has been heard from (the
        leader counts itself), the check-quorum timer starts again."""
        if voter_id == self.local_id or voter_id not in self.voters:
            return
        self._fetched_voters.add(voter_id)
        needed = len(self.voters) // 2  # a majority, less the leader itself
        if len(self._fetched_voters) >= needed:
            self._fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self._check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        return len(self.voters) > 1 and now_ms >= self.check_quorum_deadline_ms

    # --- DescribeQuorum ---

    def describe(self, now_ms: int) -> tuple[tuple[ReplicaDescription, ...], tuple[ReplicaDescription, ...]]:
        for replica_id, progress in list(self.observers.items()):
            if now_ms - progress.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS:
                del self.observers[replica_id]
        voters = []
        for voter_id in sorted(self.voters):
            progress = self.voters[voter_id]
            if voter_id == self.local_id:
                # The leader is caught up with itself by definition (as Kafka reports it).
                voters.append(ReplicaDescription(voter_id, self.local_end_offset, now_ms, now_ms))
            else:
                voters.append(progress.describe())
        observers = tuple(self.observers[o].describe() for o in sorted(self.observers))
        return tuple(voters), observers
