"""A follower's fetch state machine for the partitions it follows from one leader: Kafka's
``AbstractFetcherThread`` / ``ReplicaFetcherThread``, sans-IO.

Each partition is FETCHING (Fetch from ``fetch_offset``, naming the epoch of the last fetched batch so
the leader can spot a divergence) or TRUNCATING (find out where to cut the log first). The caller asks
``next_request(now)`` for the one request to send to the leader (a fetcher has at most one in flight,
as Kafka's thread) and hands back the answer, or None when it failed (timeout, disconnect); partitions
then wait ``replica.fetch.backoff.ms``. The answers act on the partitions directly (append, truncate).

Where the log is cut (KIP-101, KIP-279, KIP-320):

- With truncation on fetch (Fetch v12+, the default), a follower with leader epochs starts FETCHING at
  its log end. When the leader finds that the follower's last fetched epoch ended earlier in its log,
  it answers a *diverging epoch* ``(epoch, end)`` and the follower cuts at ``min(end, its own end of
  that epoch)``; if it never had that epoch, it cuts at the end of the largest epoch below it and the
  next Fetch (with the new last epoch) checks again.
- Without it (``truncate_on_fetch=False``), the same comparison runs over OffsetsForLeaderEpoch before
  fetching, round after round until the follower has the leader's epoch.
- A follower with no leader epochs at all can only trust its high watermark: it cuts there.
- OFFSET_OUT_OF_RANGE: the leader's log ends below ours (cut to its end) or starts above our end
  (empty our log and start at its start); the leader's offsets come from a ListOffsets round.

Errors (KIP-320): FENCED_LEADER_EPOCH with the epoch we sent means our metadata is behind: the
partition leaves the fetcher until new metadata re-adds it. UNKNOWN_LEADER_EPOCH (the leader is
behind), NOT_LEADER_OR_FOLLOWER and the rest: back off and retry.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

from onceflow.broker.replica.config import ReplicaConfig
from onceflow.broker.replica.partition import NO_EPOCH, FetchAnswer, FollowerFetch, ReplicatedPartition
from onceflow.log.follower_append import UnexpectedAppendOffset
from onceflow.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
# A leader whose authorizer does not let this broker replicate (no CLUSTER_ACTION on the cluster).
_DENIED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED})

PartitionKey = tuple[str, int]


class FetchState(enum.Enum):
    FETCHING = "fetching"
    TRUNCATING = "truncating"
    OUT_OF_RANGE = "out-of-range"  # waiting for the leader's log start and end


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    fetch_offset: int
    current_leader_epoch: int
    state: FetchState
    last_fetched_epoch: int = NO_EPOCH
    delayed_until_ms: int = 0
    lag: int | None = None


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    leader_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: dict[PartitionKey, FollowerFetch]


@dataclass(frozen=True, slots=True)
class EpochRequestData:
    """OffsetsForLeaderEpoch: per partition (current leader epoch, epoch whose end we ask)."""

    leader_id: int
    partitions: dict[PartitionKey, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class LeaderOffsetsRequestData:
    """ListOffsets (earliest and latest, as a replica): per partition, the current leader epoch."""

    leader_id: int
    partitions: dict[PartitionKey, int]


FetcherRequest = FetchRequestData | EpochRequestData | LeaderOffsetsRequestData


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    error: ErrorCode
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class LeaderOffsets:
    error: ErrorCode
    log_start_offset: int = -1
    log_end_offset: int = -1


class ReplicaFetcher:
    """The partitions this broker follows from broker ``leader_id``."""

    def __init__(
        self, leader_id: int, config: ReplicaConfig, *, broker_epoch: int = -1, truncate_on_fetch: bool = True
    ) -> None:
        self.leader_id = leader_id
        self.config = config
        self.broker_epoch = broker_epoch
        self.truncate_on_fetch = truncate_on_fetch
        self._partitions: dict[PartitionKey, ReplicatedPartition] = {}
        self._states: dict[PartitionKey, PartitionFetchState] = {}
        self._in_flight: FetcherRequest | None = None
        self.failed: set[PartitionKey] = set()  # fenced: waiting for new metadata
        self._denial_logged = False  # the leader's authorizer refuses us: said once, at WARNING

    # -- membership ------------------------------------------------------------------------------

    def add_partition(self, partition: ReplicatedPartition, now_ms: int) -> None:
        """Follow ``partition`` from this leader in its current leader epoch (a re-add in the same epoch
        keeps the fetch position)."""
        key = (partition.topic, partition.index)
        self.failed.discard(key)
        current = self._states.get(key)
        if current is not None and current.current_leader_epoch == partition.leader_epoch:
            self._partitions[key] = partition
            return
        plog = partition.log
        latest = plog.leader_epochs.latest_epoch
        if latest is not None and self.truncate_on_fetch:
            state = PartitionFetchState(
                plog.log_end_offset, partition.leader_epoch, FetchState.FETCHING, latest
            )
        elif latest is not None:
            state = PartitionFetchState(plog.log_end_offset, partition.leader_epoch, FetchState.TRUNCATING)
        else:
            state = PartitionFetchState(plog.high_watermark, partition.leader_epoch, FetchState.TRUNCATING)
        self._partitions[key] = partition
        self._states[key] = state
        self._truncate_without_epochs(key, partition, state)

    def remove_partition(self, key: PartitionKey) -> None:
        self._partitions.pop(key, None)
        self._states.pop(key, None)
        self.failed.discard(key)

    @property
    def partition_keys(self) -> list[PartitionKey]:
        return list(self._partitions)

    def state(self, key: PartitionKey) -> PartitionFetchState | None:
        return self._states.get(key)

    @property
    def idle(self) -> bool:
        return not self._partitions

    @property
    def in_flight(self) -> FetcherRequest | None:
        """The request sent and not answered yet."""
        return self._in_flight

    # -- requests ---------------------------------------------------------------------------------

    def next_request(self, now_ms: int) -> FetcherRequest | None:
        """The request to send now, if any (None while one is in flight or every partition waits)."""
        if self._in_flight is not None:
            return None
        ready = {k: s for k, s in self._states.items() if s.delayed_until_ms <= now_ms}
        request: FetcherRequest | None = None
        out_of_range = {
            k: s.current_leader_epoch for k, s in ready.items() if s.state is FetchState.OUT_OF_RANGE
        }
        truncating = {
            k: (s.current_leader_epoch, self._partitions[k].log.leader_epochs.latest_epoch or 0)
            for k, s in ready.items()
            if s.state is FetchState.TRUNCATING
        }
        if out_of_range:
            request = LeaderOffsetsRequestData(self.leader_id, out_of_range)
        elif truncating:
            request = EpochRequestData(self.leader_id, truncating)
        else:
            fetches = {
                k: FollowerFetch(
                    self.config.broker_id,
                    self.broker_epoch,
                    s.fetch_offset,
                    self._partitions[k].log.log_start_offset,
                    s.current_leader_epoch,
                    s.last_fetched_epoch,
                    self.config.replica_fetch_max_bytes,
                )
                for k, s in ready.items()
                if s.state is FetchState.FETCHING
            }
            if fetches:
                request = FetchRequestData(
                    self.leader_id,
                    self.config.replica_fetch_wait_max_ms,
                    self.config.replica_fetch_min_bytes,
                    self.config.replica_fetch_response_max_bytes,
                    fetches,
                )
        self._in_flight = request
        return request

    def next_deadline_ms(self) -> int | None:
        """When a waiting partition is ready again (for the caller's timer), if any waits."""
        waiting = [s.delayed_until_ms for s in self._states.values() if s.delayed_until_ms > 0]
        return min(waiting) if waiting else None

    # -- answers ----------------------------------------------------------------------------------

    def handle_fetch(
        self, request: FetchRequestData, answers: dict[PartitionKey, FetchAnswer] | None, now_ms: int
    ) -> None:
        self._done(request)
        if answers is None:
            self._back_off(request.partitions, now_ms)
            return
        retry: list[PartitionKey] = []
        for key, answer in answers.items():
            sent = request.partitions.get(key)
            state = self._states.get(key)
            if sent is None or state is None or state.state is not FetchState.FETCHING:
                continue
            if (
                state.fetch_offset != sent.fetch_offset
                or state.current_leader_epoch != sent.current_leader_epoch
            ):
                continue  # the partition moved on (re-added, truncated) while the request was out
            if not self._apply_fetch(key, state, sent, answer):
                retry.append(key)
        self._back_off(retry, now_ms)

    def handle_epochs(
        self, request: EpochRequestData, answers: dict[PartitionKey, EpochEndOffset] | None, now_ms: int
    ) -> None:
        self._done(request)
        if answers is None:
            self._back_off(request.partitions, now_ms)
            return
        retry: list[PartitionKey] = []
        for key, answer in answers.items():
            sent = request.partitions.get(key)
            state = self._states.get(key)
            if sent is None or state is None or state.state is not FetchState.TRUNCATING:
                continue
            if state.current_leader_epoch != sent[0]:
                continue
            if answer.error == ErrorCode.NONE:
                self._truncate(key, answer.leader_epoch, answer.end_offset)
            elif answer.error == ErrorCode.FENCED_LEADER_EPOCH:
                self._fenced(key)
            else:
                retry.append(key)
        self._back_off(retry, now_ms)

    def handle_leader_offsets(
        self,
        request: LeaderOffsetsRequestData,
        answers: dict[PartitionKey, LeaderOffsets] | None,
        now_ms: int,
    ) -> None:
        self._done(request)
        if answers is None:
            self._back_off(request.partitions, now_ms)
            return
        retry: list[PartitionKey] = []
        for key, answer in answers.items():
            state = self._states.get(key)
            if state is None or state.state is not FetchState.OUT_OF_RANGE:
                continue
            if state.current_leader_epoch != request.partitions.get(key):
                continue
            if answer.error == ErrorCode.NONE:
                self._reset_out_of_range(key, answer.log_start_offset, answer.log_end_offset)
            elif answer.error == ErrorCode.FENCED_LEADER_EPOCH:
                self._fenced(key)
            else:
                retry.append(key)
        self._back_off(retry, now_ms)

    # -- internals --------------------------------------------------------------------------------

    def _done(self, request: FetcherRequest) -> None:
        if self._in_flight is request:
            self._in_flight = None

    def _back_off(self, keys: Iterable[PartitionKey], now_ms: int) -> None:
        until = now_ms + self.config.replica_fetch_backoff_ms
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                self._states[key] = replace(state, delayed_until_ms=until)

    def _apply_fetch(
        self, key: PartitionKey, state: PartitionFetchState, sent: FollowerFetch, answer: FetchAnswer
    ) -> bool:
        """Act on one partition's Fetch answer; False to back off."""
        partition = self._partitions[key]
        error = answer.error
        if error == ErrorCode.NONE:
            if answer.diverging_epoch is not None:
                epoch, end = answer.diverging_epoch
                self._truncate(key, epoch, end)
                return True
            try:
                result = partition.append_as_follower(
                    answer.records, answer.high_watermark, answer.log_start_offset
                )
            except UnexpectedAppendOffset:
                log.exception(
                    "%s: fetched data does not continue the log; waiting for new metadata", partition.name
                )
                self._fail(key)
                return True
            except KafkaError as exc:
                log.warning("%s: bad fetched data at offset %d: %s", partition.name, sent.fetch_offset, exc)
                return False
            next_offset = result.last_offset + 1 if result is not None else state.fetch_offset
            last_epoch = result.last_leader_epoch if result is not None else state.last_fetched_epoch
            self._states[key] = PartitionFetchState(
                next_offset,
                state.current_leader_epoch,
                FetchState.FETCHING,
                last_epoch,
                lag=max(0, answer.high_watermark - next_offset),
            )
            return True
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._states[key] = replace(state, state=FetchState.OUT_OF_RANGE)
            return True
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            return self._fenced(key)
        if error in _DENIED and not self._denial_logged:
            self._denial_logged = True
            log.warning(
                "%s: broker %d's authorizer refuses this broker's fetches (%s): its inter-broker principal "
                "needs CLUSTER_ACTION on the cluster (a super user; see docs/security.md, 'In a cluster')",
                partition.name,
                self.leader_id,
                error.name,
            )
        log.debug("%s: fetch from %d failed with %s", partition.name, self.leader_id, error.name)
        return False

    def _fenced(self, key: PartitionKey) -> bool:
        """Our leader epoch is older than the leader's: wait for the metadata that says so."""
        log.info(
            "%s: fenced by leader %d; waiting for new metadata", self._partitions[key].name, self.leader_id
        )
        self._fail(key)
        return True

    def _fail(self, key: PartitionKey) -> None:
        self._partitions.pop(key, None)
        self._states.pop(key, None)
        self.failed.add(key)

    def _truncate(self, key: PartitionKey, leader_epoch: int, leader_end: int) -> None:
        """Cut the log where the leader's answer says it parts from ours (see the module docstring)."""
        partition = self._partitions[key]
        state = self._states[key]
        plog = partition.log
        replica_end = plog.log_end_offset
        complete = True
        if leader_end == UNDEFINED_EPOCH_OFFSET:
            offset = state.fetch_offset
        elif leader_epoch == UNDEFINED_EPOCH:
            offset = min(leader_end, replica_end)
        else:
            mine = plog.end_offset_for_epoch(leader_epoch)
            if mine is None:
                offset = min(leader_end, replica_end)
            elif mine[0] != leader_epoch:
                offset, complete = min(mine[1], replica_end), False
            else:
                offset = min(mine[1], leader_end, replica_end)
        log.info(
            "%s: truncating to %d (leader %d says epoch %d ends at %d; log end %d)",
            partition.name,
            offset,
            self.leader_id,
            leader_epoch,
            leader_end,
            replica_end,
        )
        partition.truncate_to(offset)
        self._after_truncation(key, partition, complete)

    def _after_truncation(self, key: PartitionKey, partition: ReplicatedPartition, complete: bool) -> None:
        state = self._states[key]
        latest = partition.log.leader_epochs.latest_epoch
        # Another OffsetsForLeaderEpoch round only helps while the log still has epochs to compare.
        fetching = self.truncate_on_fetch or complete or latest is None
        self._states[key] = PartitionFetchState(
            partition.log.log_end_offset,
            state.current_leader_epoch,
            FetchState.FETCHING if fetching else FetchState.TRUNCATING,
            latest if latest is not None else NO_EPOCH,
        )

    def _truncate_without_epochs(
        self, key: PartitionKey, partition: ReplicatedPartition, state: PartitionFetchState
    ) -> None:
        """A TRUNCATING partition without leader epochs cuts at its high watermark at once."""
        if state.state is FetchState.TRUNCATING and partition.log.leader_epochs.latest_epoch is None:
            partition.truncate_to(state.fetch_offset)
            self._after_truncation(key, partition, True)

    def _reset_out_of_range(self, key: PartitionKey, leader_start: int, leader_end: int) -> None:
        partition = self._partitions[key]
        replica_end = partition.log.log_end_offset
        if leader_end < replica_end:
            log.warning(
                "%s: the leader's log ends at %d, below ours (%d): truncating",
                partition.name,
                leader_end,
                replica_end,
            )
            partition.truncate_to(leader_end)
        elif leader_start > replica_end:
            log.warning(
                "%s: the leader's log starts at %d, after our end %d: starting over",
                partition.name,
                leader_start,
                replica_end,
            )
            partition.truncate_fully_and_start_at(leader_start)
        self._after_truncation(key, partition, True)
