"""Every replicated partition of one broker: Kafka's ``ReplicaManager``, sans-IO.

It holds the broker's ``ReplicatedPartition``s and one ``ReplicaFetcher`` per leader it follows, and
takes what happens as calls with the time passed in:

- ``apply_image(image, now)``: a new metadata image; the partitions whose registration changed
  become leader or follower (Kafka's ``applyDelta`` over ``local_changes``), fetchers are restarted
  for the followers whose leader epoch moved, and the partitions this broker left are dropped;
- ``append(...)``: a produce to a partition it leads; acks=all answers through ``on_complete`` once
  the ISR has the batches (or with an error at the request's timeout);
- ``fetch_for_follower(...)``: a follower's Fetch, answered through ``reply`` at once when there is
  data or an error, else held until data arrives or ``max_wait_ms`` passes (Kafka's delayed fetch);
- ``handle_fetcher_response`` / ``handle_alter_partition_response``: answers to what it sent.

``poll(now)`` returns what to send (each fetcher's next request to its leader, AlterPartition requests
to the controller), runs the ISR checks and timeouts, and completes waiting produces and fetches.
``checkpoint_high_watermarks()`` writes ``replication-offset-checkpoint``; a partition opened later
starts from the high watermark found there. The asyncio broker and the seeded simulator both drive
this object; the first moves bytes, the second moves Python objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.broker.replica.acks import PendingProduce
from onceflow.broker.replica.alter_partition import build_request, parse_response
from onceflow.broker.replica.config import ReplicaConfig
from onceflow.broker.replica.fetcher import (
    EpochEndOffset,
    EpochRequestData,
    FetcherRequest,
    FetchRequestData,
    LeaderOffsets,
    LeaderOffsetsRequestData,
    ReplicaFetcher,
)
from onceflow.broker.replica.image_view import ImageBrokerView
from onceflow.broker.replica.isr import AlterPartitionProposal
from onceflow.broker.replica.partition import FetchAnswer, ReplicatedPartition
from onceflow.log.append_origin import AppendOrigin
from onceflow.log.log import Log
from onceflow.log.log_append import AppendResult
from onceflow.log.offset_checkpoint import read_offsets, write_offsets
from onceflow.metadata.delta import local_changes
from onceflow.metadata.image import NO_LEADER, MetadataImage
from onceflow.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollower
from onceflow.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
FetchReply = Callable[[dict[PartitionKey, FetchAnswer]], None]
ProduceDone = Callable[[AppendResult, ErrorCode], None]


@dataclass(frozen=True, slots=True)
class ToLeader:
    """A fetcher's request for broker ``leader_id``."""

    leader_id: int
    request: FetcherRequest


@dataclass(frozen=True, slots=True)
class ToController:
    """AlterPartition for the controller; its answer goes to ``handle_alter_partition_response``
    with the same ``proposals``."""

    request: AlterPartitionRequest
    proposals: tuple[AlterPartitionProposal, ...]


Outgoing = ToLeader | ToController


class ReplicaManager:
    def __init__(
        self,
        config: ReplicaConfig,
        open_log: Callable[[str, int, Any], Log],
        *,
        checkpoint_path: Path | None = None,
        truncate_on_fetch: bool = True,
        request_timeout_ms: int = 30_000,
        partition_class: type[ReplicatedPartition] = ReplicatedPartition,
        on_leadership: Callable[[PartitionKey, ReplicatedPartition], None] | None = None,
        on_high_watermark: Callable[[PartitionKey, int], None] | None = None,
    ) -> None:
        """``open_log(topic, index, topic_id)`` opens (or creates) a replica's log. ``on_leadership``
        hears of each partition that became leader or follower (a coordinator loads or unloads its
        state); ``on_high_watermark`` of each leader's high watermark that moved."""
        self.config = config
        self.broker_id = config.broker_id
        self._open_log = open_log
        self.checkpoint_path = checkpoint_path
        self.truncate_on_fetch = truncate_on_fetch
        self.request_timeout_ms = request_timeout_ms
        self._partition_class = partition_class
        self.on_leadership = on_leadership
        self.on_high_watermark = on_high_watermark
        self.image = MetadataImage.EMPTY
        self.broker_epoch = -1
        self.view = ImageBrokerView(lambda: self.image)
        self.partitions: dict[PartitionKey, ReplicatedPartition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._checkpointed = read_offsets(checkpoint_path) if checkpoint_path is not None else {}
        self._fetch_sent_at: dict[int, int] = {}
        self._alters_in_flight: list[tuple[int, tuple[AlterPartitionProposal, ...]]] = []
        self._produces: list[tuple[PendingProduce, AppendResult, ProduceDone]] = []
        self._parked: list[tuple[int, FetchRequestData, FetchReply]] = []
        self._next_isr_check = 0
        self._known_hw: dict[PartitionKey, int] = {}

    # -- metadata ---------------------------------------------------------------------------------

    def apply_image(self, image: MetadataImage, now_ms: int) -> None:
        """Act on a new metadata image (see the module docstring)."""
        before, self.image = self.image, image
        if before is image:
            return
        changes = local_changes(before, image, self.broker_id)
        for key in changes.deletes:
            self._stop_fetching(key)
            self.partitions.pop(key, None)
            self._known_hw.pop(key, None)
        for key, local in changes.leaders.items():
            partition = self._partition(key, local.topic_id)
            if partition is None:
                continue
            self._stop_fetching(key)
            was_leader = partition.is_leader
            partition.become_leader(local.partition, now_ms)
            if partition.is_leader and (not was_leader or key in changes.elected_leaders):
                self._notify_leadership(key, partition)
            self._high_watermark_moved(key, partition)
        for key, local in changes.followers.items():
            partition = self._partition(key, local.topic_id)
            if partition is None:
                continue
            was_leader = partition.is_leader
            if partition.become_follower(local.partition, now_ms):
                self._stop_fetching(key)
                leader = local.partition.leader
                if leader != NO_LEADER and leader != self.broker_id:
                    self._fetcher(leader).add_partition(partition, now_ms)
            if was_leader and not partition.is_leader:
                self._notify_leadership(key, partition)
        for leader_id, fetcher in list(self.fetchers.items()):
            if fetcher.idle and not fetcher.failed and fetcher.in_flight is None:
                del self.fetchers[leader_id]
        self._settle(now_ms)

    def partition(self, key: PartitionKey) -> ReplicatedPartition | None:
        return self.partitions.get(key)

    def _partition(self, key: PartitionKey, topic_id: Any) -> ReplicatedPartition | None:
        """The replica of ``key``, opening its log the first time; None if the log cannot be opened
        (a full disk, no file descriptors: the owner of the logs reports it; the next image retries)."""
        partition = self.partitions.get(key)
        if partition is None:
            try:
                plog = self._open_log(key[0], key[1], topic_id)
            except (KafkaError, OSError) as exc:
                log.error("no replica of %s-%d on broker %d: %s", key[0], key[1], self.broker_id, exc)
                return None
            partition = self._partition_class(
                key[0],
                key[1],
                plog,
                self.config,
                self.view,
                topic_id=topic_id,
                initial_high_watermark=self._checkpointed.get(key, 0),
            )
            self.partitions[key] = partition
        return partition

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(
                leader_id,
                self.config,
                broker_epoch=self.broker_epoch,
                truncate_on_fetch=self.truncate_on_fetch,
            )
        return fetcher

    def _stop_fetching(self, key: PartitionKey) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove_partition(key)

    def _notify_leadership(self, key: PartitionKey, partition: ReplicatedPartition) -> None:
        if self.on_leadership is not None:
            self.on_leadership(key, partition)

    # -- produce ----------------------------------------------------------------------------------

    def append(
        self,
        key: PartitionKey,
        batches: list[tuple[BatchHeader, memoryview]],
        now_ms: int,
        *,
        required_acks: int = -1,
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        on_complete: ProduceDone | None = None,
    ) -> AppendResult:
        """Append to a partition led here. Errors before the write raise (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS, the log's own); with acks=all ``on_complete(result, error)`` is called
        once the ISR has the batches (NONE), or with the error that ended the wait (possibly before
        this returns)."""
        partition = self.partitions.get(key)
        if partition is None:
            raise NotLeaderOrFollower(f"broker {self.broker_id} holds no replica of {key[0]}-{key[1]}")
        result = partition.append_as_leader(batches, now_ms, required_acks=required_acks, origin=origin)
        if required_acks == -1 and on_complete is not None:
            pending = PendingProduce({key: result.last_offset + 1}, now_ms + timeout_ms)
            self._produces.append((pending, result, on_complete))
        self._high_watermark_moved(key, partition)
        self._complete_parked(now_ms)
        self._complete_produces(now_ms)
        return result

    def when_replicated(
        self,
        key: PartitionKey,
        required_offset: int,
        now_ms: int,
        timeout_ms: int,
        on_complete: Callable[[ErrorCode], None],
    ) -> None:
        """Call ``on_complete(error)`` once the ISR holds everything below ``required_offset`` of a
        partition led here (the high watermark reached it): NONE, or the error that ended the wait.
        For appends made another way (transaction markers, coordinator records) that must be
        replicated before anything depends on them."""
        result = AppendResult(required_offset - 1, required_offset - 1, -1, -1)
        pending = PendingProduce({key: required_offset}, now_ms + timeout_ms)
        self._produces.append((pending, result, lambda _result, error: on_complete(error)))
        self._complete_produces(now_ms)

    def _complete_produces(self, now_ms: int) -> None:
        if not self._produces:
            return
        still = []
        for pending, result, done in self._produces:
            if pending.try_complete(self.partitions.get, now_ms):
                done(result, next(iter(pending.errors.values())))
            else:
                still.append((pending, result, done))
        self._produces = still

    # -- serving followers ------------------------------------------------------------------------

    def fetch_for_follower(self, request: FetchRequestData, now_ms: int, reply: FetchReply) -> None:
        """A follower's Fetch: answered through ``reply`` now or once data comes (at most
        ``max_wait_ms`` later)."""
        answers: dict[PartitionKey, FetchAnswer] = {}
        ready = False
        for key, fetch in request.partitions.items():
            partition = self.partitions.get(key)
            if partition is None:
                answers[key] = FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                ready = True
                continue
            answer = partition.fetch_for_follower(fetch, now_ms)
            answers[key] = answer
            ready = ready or bool(answer.records or answer.error or answer.diverging_epoch)
            self._high_watermark_moved(key, partition)
        self._complete_produces(now_ms)
        if ready or request.max_wait_ms <= 0:
            reply(answers)
        else:
            self._parked.append((now_ms + request.max_wait_ms, request, reply))

    def _complete_parked(self, now_ms: int) -> None:
        if not self._parked:
            return
        still = []
        for deadline, request, reply in self._parked:
            ready = now_ms >= deadline
            for key, fetch in request.partitions.items():
                partition = self.partitions.get(key)
                if (
                    partition is None
                    or not partition.is_leader
                    or partition.log.log_end_offset > fetch.fetch_offset
                ):
                    ready = True
            if not ready:
                still.append((deadline, request, reply))
                continue
            answers = {}
            for key, fetch in request.partitions.items():
                partition = self.partitions.get(key)
                answers[key] = (
                    partition.fetch_for_follower(fetch, now_ms, record_progress=False)
                    if partition is not None
                    else FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                )
            reply(answers)
        self._parked = still

    def last_offset_for_leader_epoch(
        self, key: PartitionKey, current_leader_epoch: int, leader_epoch: int, *, require_leader: bool
    ) -> EpochEndOffset:
        partition = self.partitions.get(key)
        if partition is None:
            return EpochEndOffset(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        error, epoch, end = partition.last_offset_for_leader_epoch(
            current_leader_epoch, leader_epoch, require_leader=require_leader
        )
        return EpochEndOffset(error, epoch, end)

    def leader_offsets(self, key: PartitionKey, current_leader_epoch: int) -> LeaderOffsets:
        partition = self.partitions.get(key)
        if partition is None:
            return LeaderOffsets(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        error = partition.check_leader_epoch(current_leader_epoch)
        if error:
            return LeaderOffsets(error)
        return LeaderOffsets(ErrorCode.NONE, partition.log.log_start_offset, partition.log.log_end_offset)

    # -- what to send, and the answers ------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Outgoing]:
        """Timers and outgoing requests (call after every event and at ``next_deadline_ms``)."""
        out: list[Outgoing] = []
        if now_ms >= self._next_isr_check:
            self._next_isr_check = now_ms + self.config.isr_check_interval_ms
            for partition in self.partitions.values():
                partition.poll(now_ms)
        for sent_at, proposals in list(self._alters_in_flight):
            if now_ms - sent_at > self.request_timeout_ms:
                self.handle_alter_partition_response(proposals, None, now_ms)
        if self.broker_epoch >= 0:
            proposals = tuple(
                p for partition in self.partitions.values() for p in partition.drain_alter_partitions()
            )
            if proposals:
                self._alters_in_flight.append((now_ms, proposals))
                out.append(
                    ToController(build_request(self.broker_id, self.broker_epoch, proposals), proposals)
                )
        for leader_id, fetcher in list(self.fetchers.items()):
            request = fetcher.in_flight
            if (
                request is not None
                and now_ms - self._fetch_sent_at.get(leader_id, now_ms) > self.request_timeout_ms
            ):
                self.handle_fetcher_response(leader_id, request, None, now_ms)
            fetcher.broker_epoch = self.broker_epoch
            request = fetcher.next_request(now_ms)
            if request is not None:
                self._fetch_sent_at[leader_id] = now_ms
                out.append(ToLeader(leader_id, request))
        self._settle(now_ms)
        return out

    def next_deadline_ms(self, now_ms: int) -> int:
        """The latest time ``poll`` must run again (sooner when anything arrives)."""
        deadlines = [self._next_isr_check, now_ms + 1000]
        deadlines += [deadline for deadline, _, _ in self._parked]
        deadlines += [pending.deadline_ms for pending, _, _ in self._produces]
        deadlines += [d for f in self.fetchers.values() if (d := f.next_deadline_ms()) is not None]
        return max(now_ms, min(deadlines))

    def handle_fetcher_response(
        self, leader_id: int, request: FetcherRequest, answers: Any, now_ms: int
    ) -> None:
        """The leader's answer to a fetcher request (None: it failed or timed out)."""
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None or fetcher.in_flight is not request:
            return
        if isinstance(request, FetchRequestData):
            fetcher.handle_fetch(request, answers, now_ms)
        elif isinstance(request, EpochRequestData):
            fetcher.handle_epochs(request, answers, now_ms)
        elif isinstance(request, LeaderOffsetsRequestData):
            fetcher.handle_leader_offsets(request, answers, now_ms)
        if fetcher.idle and not fetcher.failed:
            del self.fetchers[leader_id]

    def handle_alter_partition_response(
        self,
        proposals: tuple[AlterPartitionProposal, ...],
        response: AlterPartitionResponse | None,
        now_ms: int,
    ) -> None:
        """The controller's answer (None: it failed or timed out; the proposals are sent again)."""
        entry = next((e for e in self._alters_in_flight if e[1] is proposals), None)
        if entry is None:
            return  # answered already, or timed out and sent again
        self._alters_in_flight.remove(entry)
        for result in parse_response(response, proposals):
            key = (result.proposal.topic, result.proposal.partition)
            partition = self.partitions.get(key)
            if partition is None:
                continue
            partition.handle_alter_partition(
                result.proposal,
                result.error,
                now_ms,
                leader_epoch=result.leader_epoch,
                partition_epoch=result.partition_epoch,
                isr=result.isr,
            )
            self._high_watermark_moved(key, partition)
        self._settle(now_ms)

    # -- bookkeeping ------------------------------------------------------------------------------

    def _settle(self, now_ms: int) -> None:
        self._complete_parked(now_ms)
        self._complete_produces(now_ms)

    def _high_watermark_moved(self, key: PartitionKey, partition: ReplicatedPartition) -> None:
        if self.on_high_watermark is None or not partition.is_leader:
            return
        hw = partition.log.high_watermark
        if self._known_hw.get(key) != hw:
            self._known_hw[key] = hw
            self.on_high_watermark(key, hw)

    def checkpoint_high_watermarks(self) -> None:
        """Write every partition's high watermark to ``replication-offset-checkpoint``."""
        if self.checkpoint_path is None:
            return
        offsets = dict(self._checkpointed)
        offsets.update({key: p.log.high_watermark for key, p in self.partitions.items()})
        write_offsets(self.checkpoint_path, offsets)

    def forget(self, keys: Iterable[PartitionKey]) -> None:
        """Partitions whose logs were closed or deleted by their owner."""
        for key in keys:
            self._stop_fetching(key)
            self.partitions.pop(key, None)
            self._checkpointed.pop(key, None)
            self._known_hw.pop(key, None)
