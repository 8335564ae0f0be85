"""The leader's view of its followers and of the ISR: Kafka's ``ReplicaState`` and ``PartitionState``.

Pure values and rules, no log and no clock of their own (times come in as arguments):

- :class:`FollowerProgress` is what the leader knows of one follower from its Fetch requests: its log
  end, log start, broker epoch, and the *last caught-up time*, the latest time at which the follower
  had fetched up to the leader's log end. A follower is caught up while that time is within
  ``replica.lag.time.max.ms`` (or its log end equals the leader's); a slow follower that keeps
  fetching a little behind a busy leader still counts, because a fetch reaching the log end the leader
  had at the *previous* fetch moves the time to that previous fetch (Kafka's rule).
- The ISR is one of three states. :class:`CommittedIsr` is what the controller last confirmed. While an
  AlterPartition is in flight the state is :class:`PendingExpandIsr` or :class:`PendingShrinkIsr`,
  and no other change is proposed. Each has a *maximal ISR*, the set that must hold an offset before
  the high watermark passes it and acks=all answers: a pending expansion already counts the new member
  (stricter, so safe whether or not the controller agrees), a pending shrink still counts the leaving
  ones (the controller might refuse). KIP-497's rule.
- :class:`AlterPartitionProposal` is the request the leader sends (ISR with broker epochs, KIP-903),
  built from its own leader and partition epochs so the controller can refuse a stale one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onceflow.metadata.image import RECOVERED

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int | None = None

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms

    def after_fetch(
        self, fetch_offset: int, log_start_offset: int, now_ms: int, leader_end_offset: int, broker_epoch: int
    ) -> FollowerProgress:
        """The progress once a Fetch at ``fetch_offset`` arrived when the leader's log ended at
        ``leader_end_offset``."""
        if fetch_offset >= leader_end_offset:
            caught_up = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        return FollowerProgress(
            log_start_offset,
            fetch_offset,
            max(leader_end_offset, self.last_fetch_leader_log_end_offset),
            now_ms,
            caught_up,
            broker_epoch,
        )

    def reset(
        self, now_ms: int, leader_end_offset: int, *, new_leader: bool, in_sync: bool
    ) -> FollowerProgress:
        """A leader epoch began: members of the ISR count as caught up now, the others not at all (so
        they hold back neither the high watermark nor come back into the ISR before fetching)."""
        caught_up = now_ms if in_sync else 0
        if new_leader:
            return FollowerProgress(
                last_fetch_leader_log_end_offset=UNKNOWN_OFFSET, last_caught_up_time_ms=caught_up
            )
        return FollowerProgress(
            self.log_start_offset,
            self.log_end_offset,
            leader_end_offset,
            now_ms if in_sync else 0,
            caught_up,
            self.broker_epoch,
        )


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """An AlterPartition the leader sends for one partition."""

    topic: str
    topic_id: object  # uuid.UUID, or None before topic ids are known
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1), ascending ids
    leader_recovery_state: int = RECOVERED

    @property
    def isr_ids(self) -> frozenset[int]:
        return frozenset(b for b, _ in self.new_isr)


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    isr: frozenset[int]
    leader_recovery_state: int = RECOVERED
    inflight: bool = field(default=False, init=False)

    @property
    def maximal(self) -> frozenset[int]:
        return self.isr


@dataclass(frozen=True, slots=True)
class PendingExpandIsr:
    new_replica: int
    proposal: AlterPartitionProposal
    last_committed: CommittedIsr
    inflight: bool = field(default=True, init=False)

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal(self) -> frozenset[int]:
        return self.last_committed.isr | {self.new_replica}

    @property
    def leader_recovery_state(self) -> int:
        return RECOVERED


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr:
    out_of_sync: frozenset[int]
    proposal: AlterPartitionProposal
    last_committed: CommittedIsr
    inflight: bool = field(default=True, init=False)

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def leader_recovery_state(self) -> int:
        return RECOVERED


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr
PendingIsr = PendingExpandIsr | PendingShrinkIsr
