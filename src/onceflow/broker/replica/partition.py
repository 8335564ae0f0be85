"""One replicated partition on one broker, as leader or follower: Kafka's ``cluster.Partition``.

Sans-IO: it owns the partition's ``Log`` (synchronous file I/O, as everywhere in the broker) and takes
what happens as method calls with the time passed in: a new metadata image (``become_leader`` /
``become_follower``), a produce, a follower's Fetch, the answer to an AlterPartition, a timer tick.
What it wants sent (AlterPartition requests to the controller) waits in an outbox the caller drains;
the asyncio broker and the deterministic simulator drive the same object.

As leader:

- ``append_as_leader`` refuses acks=all when the ISR is smaller than ``min.insync.replicas``
  (NOT_ENOUGH_REPLICAS, nothing written), stamps the leader epoch into the batches and moves the high
  watermark; ``check_enough_replicas(offset)`` says when an acks=all produce can be answered (every
  member of the maximal ISR has the offset: the high watermark passed it) and whether the ISR shrank
  below ``min.insync.replicas`` meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
- ``fetch_for_follower`` checks the follower's leader epoch (FENCED_LEADER_EPOCH for an older one,
  UNKNOWN_LEADER_EPOCH for a newer one, KIP-320), answers a diverging epoch when the follower's last
  fetched epoch ended earlier here (KIP-320's truncation on fetch), else reads from the fetch offset
  and records the follower's progress: that may add it to the ISR and move the high watermark.
- The high watermark is the lowest log end among the maximal ISR and the caught-up followers that
  could join it, never moved while the ISR is under ``min.insync.replicas`` (Kafka 3.7+). ISR changes
  go through the controller as AlterPartition, one at a time; ``poll`` drops followers that have not
  caught up for ``replica.lag.time.max.ms``.

As follower it only holds the log and the leader's identity; the fetcher (``fetcher``) decides what to
fetch and truncate, and calls ``append_as_follower`` / ``truncate_to`` here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from onceflow.broker.replica.config import BrokerView, ReplicaConfig
from onceflow.broker.replica.isr import (
    AlterPartitionProposal,
    CommittedIsr,
    FollowerProgress,
    IsrState,
    PendingExpandIsr,
    PendingShrinkIsr,
)
from onceflow.log.append_origin import AppendOrigin
from onceflow.log.follower_append import FollowerAppendResult, append_as_follower
from onceflow.log.log import Log
from onceflow.log.log_append import AppendResult
from onceflow.metadata.image import NO_LEADER, PartitionRegistration
from onceflow.protocol.errors import ErrorCode, NotEnoughReplicas, NotLeaderOrFollower
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

NO_EPOCH = -1

# AlterPartition errors after which the leader waits for new metadata instead of retrying (Kafka's
# Partition.handleAlterPartitionError); OPERATION_NOT_ATTEMPTED and INELIGIBLE_REPLICA also drop the
# proposal, since the controller says it applied nothing.
_REVERT_ERRORS = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
_AWAIT_METADATA_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NEW_LEADER_ELECTED,
    }
)


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One partition of a follower's Fetch request."""

    replica_id: int
    replica_epoch: int  # the follower's broker epoch, -1 if not sent
    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int  # NO_EPOCH if not sent
    last_fetched_epoch: int  # NO_EPOCH if not sent
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The leader's answer for one partition of a follower's Fetch."""

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) to truncate to


def leader_epoch_error(requested: int, current: int) -> ErrorCode:
    """What a request naming leader epoch ``requested`` gets from a replica in epoch ``current``
    (KIP-320): FENCED_LEADER_EPOCH if older, UNKNOWN_LEADER_EPOCH if newer; -1 checks nothing."""
    if requested in (NO_EPOCH, current):
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


class ReplicatedPartition:
    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        config: ReplicaConfig,
        brokers: BrokerView,
        *,
        topic_id: object = None,
        initial_high_watermark: int = 0,
    ) -> None:
        self.topic, self.index, self.topic_id = topic, index, topic_id
        self.log = log
        self.config = config
        self.brokers = brokers
        self.broker_id = config.broker_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        self._isr: IsrState = CommittedIsr(frozenset())
        self._followers: dict[int, FollowerProgress] = {}
        self._epoch_start_offset: int | None = None
        self._outbox: list[AlterPartitionProposal] = []
        log.update_high_watermark(initial_high_watermark)

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (
            f"ReplicatedPartition({self.name} on {self.broker_id}, {role}, epoch {self.leader_epoch}, "
            f"isr {sorted(self._isr.isr)}, [{self.log.log_start_offset}, {self.log.high_watermark}, "
            f"{self.log.log_end_offset}])"
        )

    # -- state ----------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def isr(self) -> frozenset[int]:
        """The ISR the controller last confirmed (empty on a follower, as Kafka's)."""
        return self._isr.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self._isr.maximal

    @property
    def isr_update_in_flight(self) -> bool:
        return self._isr.inflight

    def follower_progress(self) -> dict[int, FollowerProgress]:
        """What the leader knows of each follower (for describing lag)."""
        return dict(self._followers)

    @property
    def effective_min_isr(self) -> int:
        """``min.insync.replicas``, but never more than the replicas there are (Kafka's effectiveMinIsr)."""
        return min(self.log.config.min_insync_replicas, len(self._followers) + 1)

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self._isr.isr) < self.effective_min_isr

    @property
    def is_under_replicated(self) -> bool:
        return self.is_leader and len(self.replicas) > len(self._isr.isr)

    def drain_alter_partitions(self) -> list[AlterPartitionProposal]:
        """The AlterPartition requests to send to the controller now."""
        out, self._outbox = self._outbox, []
        return out

    # -- leadership changes (from the metadata image) --------------------------------------------

    def become_leader(self, registration: PartitionRegistration, now_ms: int) -> bool:
        """Lead as ``registration`` says; True when this broker was not the leader before. A registration
        older than what this partition knows (a lower partition epoch) changes nothing."""
        if registration.partition_epoch < self.partition_epoch:
            return False
        is_new_leader = not self.is_leader
        new_epoch = registration.leader_epoch > self.leader_epoch
        isr = frozenset(registration.isr)
        self.replicas = tuple(registration.replicas)
        self._followers = {
            r: self._followers.get(r, FollowerProgress()) for r in self.replicas if r != self.broker_id
        }
        self._isr = CommittedIsr(isr)
        if new_epoch:
            # A follower may hold batches of a later epoch than any of ours (fast elections): recording
            # this epoch's start now gives it an answer for any epoch it asks about (Kafka's makeLeader).
            start = self.log.log_end_offset
            self.log.leader_epochs.assign(registration.leader_epoch, start)
            for r, progress in self._followers.items():
                self._followers[r] = progress.reset(now_ms, start, new_leader=is_new_leader, in_sync=r in isr)
            self.leader_epoch = registration.leader_epoch
            self._epoch_start_offset = start
            log.info(
                "%s: leader on broker %d from epoch %d at offset %d, ISR %s, high watermark %d",
                self.name,
                self.broker_id,
                self.leader_epoch,
                start,
                sorted(isr),
                self.log.high_watermark,
            )
        self.partition_epoch = registration.partition_epoch
        self.leader_id = self.broker_id
        self._maybe_increment_high_watermark(now_ms)
        return is_new_leader

    def become_follower(self, registration: PartitionRegistration, now_ms: int) -> bool:
        """Follow ``registration``'s leader; True when the leader epoch moved (the fetcher must restart
        from this log's end and check for divergence)."""
        if registration.partition_epoch < self.partition_epoch:
            return False
        new_epoch = registration.leader_epoch > self.leader_epoch
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = tuple(registration.replicas)
        self._epoch_start_offset = None
        self._followers = {}
        self._isr = CommittedIsr(frozenset())
        self._outbox = []
        if new_epoch:
            log.info(
                "%s: follower on broker %d of leader %d in epoch %d from offset %d",
                self.name,
                self.broker_id,
                self.leader_id,
                self.leader_epoch,
                self.log.log_end_offset,
            )
        return new_epoch

    # -- the leader's work -----------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True) -> ErrorCode:
        """KIP-320: a request naming an older leader epoch is fenced, a newer one is unknown here."""
        error = leader_epoch_error(current_leader_epoch, self.leader_epoch)
        if error == ErrorCode.NONE and require_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return error

    def append_as_leader(
        self,
        batches: list[tuple[BatchHeader, memoryview]],
        now_ms: int,
        *,
        required_acks: int = -1,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendResult:
        if not self.is_leader:
            raise NotLeaderOrFollower(
                f"Leader not local for partition {self.name} on broker {self.broker_id} "
                f"(leader {self.leader_id}, epoch {self.leader_epoch})"
            )
        min_isr = self.effective_min_isr
        if required_acks == -1 and len(self._isr.isr) < min_isr:
            raise NotEnoughReplicas(
                f"The size of the current ISR {sorted(self._isr.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.name}"
            )
        result = self.log.append(batches, origin=origin, leader_epoch=self.leader_epoch)
        self._maybe_increment_high_watermark(now_ms)
        return result

    def check_enough_replicas(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """Whether an acks=all produce ending before ``required_offset`` can be answered, and how."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if self.effective_min_isr <= len(self._isr.maximal):
            return True, ErrorCode.NONE
        return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def fetch_for_follower(
        self, fetch: FollowerFetch, now_ms: int, *, record_progress: bool = True
    ) -> FetchAnswer:
        """Answer a follower's fetch of this partition. ``record_progress`` False re-reads for a fetch
        that waited for data (Kafka's delayed fetch): its progress was recorded when it arrived."""
        error = self.check_leader_epoch(fetch.current_leader_epoch)
        if error:
            return FetchAnswer(error)
        progress = self._followers.get(fetch.replica_id)
        if progress is None:
            # Not a replica here (yet): the follower retries once our metadata catches up with its own.
            known_epoch = fetch.current_leader_epoch != NO_EPOCH
            return FetchAnswer(
                ErrorCode.UNKNOWN_LEADER_EPOCH if known_epoch else ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
        registered = self.brokers.broker_epoch(fetch.replica_id)
        if fetch.replica_epoch != -1 and registered is not None and registered > fetch.replica_epoch:
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # a fetch from a previous incarnation
        plog = self.log
        start, end = plog.log_start_offset, plog.log_end_offset
        if fetch.last_fetched_epoch != NO_EPOCH:
            found = plog.end_offset_for_epoch(fetch.last_fetched_epoch)
            if found is None or fetch.fetch_offset < start:
                return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE)
            epoch, epoch_end = found
            if epoch < fetch.last_fetched_epoch or epoch_end < fetch.fetch_offset:
                return FetchAnswer(
                    ErrorCode.NONE,
                    plog.high_watermark,
                    plog.last_stable_offset,
                    start,
                    end,
                    diverging_epoch=(epoch, epoch_end),
                )
        if not start <= fetch.fetch_offset <= end:
            return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE)
        records = plog.read(fetch.fetch_offset, fetch.max_bytes) if fetch.fetch_offset < end else b""
        if not record_progress:
            return FetchAnswer(
                ErrorCode.NONE, plog.high_watermark, plog.last_stable_offset, start, end, bytes(records)
            )
        previous_end = progress.log_end_offset
        self._followers[fetch.replica_id] = progress.after_fetch(
            fetch.fetch_offset, fetch.log_start_offset, now_ms, end, fetch.replica_epoch
        )
        self._maybe_expand_isr(fetch.replica_id)
        if previous_end != fetch.fetch_offset:
            self._maybe_increment_high_watermark(now_ms)
        return FetchAnswer(
            ErrorCode.NONE, plog.high_watermark, plog.last_stable_offset, start, end, bytes(records)
        )

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, leader_epoch: int, *, require_leader: bool
    ) -> tuple[ErrorCode, int, int]:
        """OffsetsForLeaderEpoch: ``(error, epoch, end offset)``; (-1, -1) for an epoch unknown here."""
        error = self.check_leader_epoch(current_leader_epoch, require_leader=require_leader)
        if error:
            return error, NO_EPOCH, -1
        found = self.log.end_offset_for_epoch(leader_epoch)
        if found is None:
            return ErrorCode.NONE, NO_EPOCH, -1
        return ErrorCode.NONE, found[0], found[1]

    def poll(self, now_ms: int) -> None:
        """The periodic ISR check: propose dropping the followers that are no longer caught up."""
        state = self._isr
        if not self.is_leader or state.inflight:
            return
        end = self.log.log_end_offset
        lag = self.config.replica_lag_time_max_ms
        out_of_sync = frozenset(
            r
            for r in state.isr
            if r != self.broker_id
            and (r not in self._followers or not self._followers[r].is_caught_up(end, now_ms, lag))
        )
        if not out_of_sync:
            return
        log.info(
            "%s: shrinking the ISR from %s to %s (leader end %d, high watermark %d, followers %s)",
            self.name,
            sorted(state.isr),
            sorted(state.isr - out_of_sync),
            end,
            self.log.high_watermark,
            {r: self._followers.get(r) for r in sorted(out_of_sync)},
        )
        proposal = self._proposal(state.isr - out_of_sync)
        self._isr = PendingShrinkIsr(out_of_sync, proposal, state)
        self._outbox.append(proposal)

    def handle_alter_partition(
        self,
        proposal: AlterPartitionProposal,
        error: ErrorCode,
        now_ms: int,
        *,
        leader_epoch: int = NO_EPOCH,
        partition_epoch: int = NO_EPOCH,
        isr: tuple[int, ...] = (),
    ) -> None:
        """The controller's answer to ``proposal`` (REQUEST_TIMED_OUT when none came). After a retriable
        error the proposal goes back to the outbox, to be sent again; an answer to a proposal this
        partition no longer waits for is ignored."""
        state = self._isr
        if not state.inflight or state.proposal != proposal:
            return
        if error != ErrorCode.NONE:
            if error in _REVERT_ERRORS:
                self._isr = state.last_committed
                log.info(
                    "%s: AlterPartition %s refused (%s); ISR stays %s",
                    self.name,
                    proposal,
                    error.name,
                    sorted(self._isr.isr),
                )
            elif error in _AWAIT_METADATA_ERRORS:
                log.info("%s: AlterPartition failed with %s; waiting for new metadata", self.name, error.name)
            else:
                self._outbox.append(proposal)
            return
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return
        self._isr = CommittedIsr(frozenset(isr))
        self.partition_epoch = partition_epoch
        log.info("%s: ISR is now %s (partition epoch %d)", self.name, sorted(isr), partition_epoch)
        self._maybe_increment_high_watermark(now_ms)

    def _maybe_expand_isr(self, replica_id: int) -> None:
        state = self._isr
        if state.inflight or replica_id in state.isr or not self._isr_eligible(replica_id):
            return
        end = self._followers[replica_id].log_end_offset
        start = self._epoch_start_offset
        # Caught up to the high watermark and to this epoch: otherwise it could lead without data the
        # previous leader committed.
        if end < self.log.high_watermark or start is None or end < start:
            return
        proposal = self._proposal(state.isr | {replica_id})
        self._isr = PendingExpandIsr(replica_id, proposal, state)
        self._outbox.append(proposal)
        log.info(
            "%s: expanding the ISR %s with %d (at offset %d)", self.name, sorted(state.isr), replica_id, end
        )

    def _maybe_increment_high_watermark(self, now_ms: int) -> bool:
        if not self.is_leader or self.is_under_min_isr:
            return False
        end = self.log.log_end_offset
        lag = self.config.replica_lag_time_max_ms
        maximal = self._isr.maximal
        new_hw = end
        for r, progress in self._followers.items():
            if progress.log_end_offset < new_hw and (
                r in maximal or (progress.is_caught_up(end, now_ms, lag) and self._isr_eligible(r))
            ):
                new_hw = progress.log_end_offset
        if new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        return True

    def _isr_eligible(self, replica_id: int) -> bool:
        progress = self._followers.get(replica_id)
        if progress is None or progress.broker_epoch is None or not self.brokers.isr_eligible(replica_id):
            return False
        return progress.broker_epoch == -1 or progress.broker_epoch == self.brokers.broker_epoch(replica_id)

    def _proposal(self, isr: frozenset[int]) -> AlterPartitionProposal:
        def epoch_of(b: int) -> int:
            if b == self.broker_id:
                epoch = self.brokers.broker_epoch(b)
            else:
                progress = self._followers.get(b)
                epoch = progress.broker_epoch if progress is not None else None
            return -1 if epoch is None else epoch

        return AlterPartitionProposal(
            self.topic,
            self.topic_id,
            self.index,
            self.broker_id,
            self.leader_epoch,
            self.partition_epoch,
            tuple((b, epoch_of(b)) for b in sorted(isr)),
            self._isr.leader_recovery_state,
        )

    # -- the follower's work (called by the fetcher) ------------------------------------------------

    def append_as_follower(
        self, records: bytes, leader_high_watermark: int, leader_log_start: int
    ) -> FollowerAppendResult | None:
        """Append fetched batches, then take the leader's high watermark (never past this log's end)
        and log start (never past the high watermark)."""
        result = append_as_follower(self.log, records) if records else None
        self.log.update_high_watermark(leader_high_watermark)
        if leader_log_start > self.log.log_start_offset:
            self.log.delete_records_before(min(leader_log_start, self.log.high_watermark))
        return result

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.high_watermark:
            log.warning(
                "%s: truncating to %d, below the high watermark %d",
                self.name,
                offset,
                self.log.high_watermark,
            )
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
