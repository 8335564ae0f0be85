"""The group coordinator: the groups of the ``__consumer_offsets`` partitions this broker has loaded,
their committed offsets, and the one way they change.

It is the runtime's shard (:mod:`onceflow.broker.coordinator.runtime`). Every entry point that changes
something is an *operation* of the group's partition: it reads the state and emits records (offset
commits, tombstones, a classic group's metadata, a consumer group's records, a transaction marker);
the runtime appends them as one batch when the operation ends, replays them here with
:meth:`GroupCoordinator.replay` (the same replay that loads a partition), and releases the answers
once the batch is committed. A failed append changes nothing and answers with Kafka's mapped error
(NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE). Timers (classic members' sessions and rebalance phases,
consumer-protocol sessions and revocation deadlines, offset expiry) are operations too.

What replay does, as Kafka's ``GroupMetadataManager`` / ``OffsetMetadataManager``:

- an offset commit goes into the :class:`OffsetStore` (a transactional one stays pending for its
  producer until the COMMIT or ABORT marker), and a group that commits without existing becomes an
  Empty classic group; an offset tombstone removes the committed and pending offset of that partition;
- a consumer-protocol group's records rebuild it (:meth:`ConsumerGroups.replay`);
- a classic group's tombstone deletes it; its metadata record is applied only while loading: it is
  written by the operation that changes the group in memory (:mod:`.membership`), as Kafka writes it.

Entry points mirror the Kafka APIs (one handler module each calls one of these). Each answers at once
(sans-IO); the broker's :class:`~onceflow.broker.group.service.GroupService` holds the answers until
the runtime says their records are committed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from onceflow.broker.coordinator.partitioning import partition_for_key
from onceflow.broker.coordinator.records import CoordinatorResult, Record, StoredBatch, marker_batch
from onceflow.broker.coordinator.runtime import CoordinatorRuntime, PartitionStatus
from onceflow.broker.coordinator.scheduler import Scheduler, TimerHandle
from onceflow.broker.coordinator.writer import PartitionWriter
from onceflow.broker.group import consumer_group_records as cg
from onceflow.broker.group import log_format as fmt
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_groups import (
    FIRST_MEMBER_EPOCH_COMMIT_VERSION,
    ConsumerGroup,
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResult,
    TopicLookup,
)
from onceflow.broker.group.descriptions import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    describe_classic_group,
    describe_consumer_group,
    not_found,
)
from onceflow.broker.group.membership import Membership
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offset_expiry import expired_of_classic_group, expired_of_consumer_group
from onceflow.broker.group.offsets import CommittedOffset, OffsetStore, TopicPartition
from onceflow.broker.group.requests import JoinCallback, JoinRequest, JoinResult, SyncCallback, SyncResult
from onceflow.broker.group.state import GroupEvent, GroupState
from onceflow.broker.group.subscriptions import subscribed_topics
from onceflow.protocol.errors import CoordinatorLoadInProgress, ErrorCode, KafkaError
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC

__all__ = [
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetCommitEntry",
    "unknown_group_commit_error",
]

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState
T = TypeVar("T")

# One broker owns every partition, under this coordinator epoch; replication makes it the leader epoch.
COORDINATOR_EPOCH = 0
_EXPIRY_TIMER = "offset-expiry"


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


class _NoTopics:
    def topic(self, name: str):
        return None

    def topic_names(self):
        return ()


def _valid_group_id(group_id: str | None, *, allow_empty: bool) -> bool:
    # Kafka lets offset commit/fetch, describe and delete use "" (old clients did); membership APIs not.
    return group_id is not None and (allow_empty or group_id != "")


def unknown_group_commit_error(
    generation_id: int, *, transactional: bool, api_version: int = FIRST_MEMBER_EPOCH_COMMIT_VERSION
) -> ErrorCode:
    """The answer to an OffsetCommit or TxnOffsetCommit naming a group this coordinator does not have
    (Kafka's group coordinator, ``OffsetMetadataManager``):

    - a generation (or member epoch) below 0 comes from outside group management (an admin tool, a
      consumer assigning its own partitions, a producer given only the group id): NONE, and the
      commit creates an empty classic group, whatever member id it carries;
    - otherwise the committer believes it is in a generation of a group that is not there:
      OffsetCommit v9+ answers GROUP_ID_NOT_FOUND, which suits members of either protocol; older
      OffsetCommit versions and every TxnOffsetCommit keep the older answer, ILLEGAL_GENERATION.
    """
    if generation_id < 0:
        return E.NONE
    if not transactional and api_version >= FIRST_MEMBER_EPOCH_COMMIT_VERSION:
        return E.GROUP_ID_NOT_FOUND
    return E.ILLEGAL_GENERATION


def _offset_record(group_id: str, tp: TopicPartition, value: CommittedOffset) -> Record:
    key = fmt.encode_offset_key(fmt.OffsetKey(group_id, tp[0], tp[1]))
    return key, fmt.encode_offset_value(
        fmt.OffsetValue(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp)
    )


def _offset_tombstone(group_id: str, tp: TopicPartition) -> Record:
    return fmt.encode_offset_key(fmt.OffsetKey(group_id, tp[0], tp[1])), None


def _group_tombstone(group_id: str) -> Record:
    return fmt.encode_group_key(fmt.GroupKey(group_id)), None


class _Writes:
    """What one operation emits; the runtime appends it as one batch when the operation returns."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.batch: StoredBatch | None = None  # a transactional batch or a marker, instead of records
        self.written: list[Callable[[], None]] = []
        self.failed: list[Callable[[KafkaError], None]] = []

    def result(self, response: T) -> CoordinatorResult[T]:
        if self.batch is not None and self.records:
            raise RuntimeError("an operation emitted both a special batch and records")
        written, failed = self.written, self.failed
        return CoordinatorResult(
            self.records,
            response,
            batch=self.batch,
            on_written=(lambda: [callback() for callback in written]) if written else None,
            on_failed=(lambda error: [callback(error) for callback in failed]) if failed else None,
        )


class GroupCoordinator:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        scheduler: Scheduler,
        topic: PartitionWriter,
        *,
        partition_exists: Callable[[str, int], bool] = lambda topic, partition: True,
        topic_lookup: TopicLookup | None = None,
    ) -> None:
        self.config = config
        self._scheduler = scheduler
        self._partition_exists = partition_exists
        self._groups: dict[str, GroupMetadata] = {}
        self._offsets = OffsetStore()
        self._writes: _Writes | None = None
        self._expiry_started = False
        self._membership = Membership(
            config,
            scheduler,
            self._store_group,
            self._classic_timer,
            lambda group: self.runtime.reload_soon(self.partition_for(group.group_id)),
        )
        # Groups of the consumer protocol (KIP-848); a group id is in at most one of the two registries.
        self.consumer_groups = ConsumerGroups(
            config.consumer,
            scheduler,
            topic_lookup or _NoTopics(),
            emit=self._emit_consumer_group,
            call_later=self._consumer_timer,
        )
        self.runtime = CoordinatorRuntime(CONSUMER_OFFSETS_TOPIC, topic, self, scheduler)
        # Until load(), every partition answers COORDINATOR_LOAD_IN_PROGRESS.
        for partition in range(self.runtime.num_partitions):
            self.runtime.begin_load(partition, COORDINATOR_EPOCH)

    # -- lifecycle -----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay every partition of ``__consumer_offsets`` and serve them (one broker owns all)."""
        for partition in range(self.runtime.num_partitions):
            self.load_partition(partition, COORDINATOR_EPOCH)
        log.info("group coordinator loaded %d groups", len(self._groups) + len(self.consumer_groups.all()))

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Become the coordinator of the groups of ``partition`` (after a failover: its new leader)."""
        self.runtime.load(partition, coordinator_epoch)

    def unload_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Stop being the coordinator of the groups of ``partition`` and forget them."""
        self.runtime.unload(partition, coordinator_epoch)

    def start_expiry(self) -> None:
        """Expire offsets every ``offsets.retention.check.interval.ms`` on each loaded partition."""
        self._expiry_started = True
        for partition in self.runtime.active_partitions():
            self._schedule_expiry(partition)

    def shutdown(self) -> None:
        self._expiry_started = False
        self.runtime.unload_all()

    @property
    def loading(self) -> bool:
        return any(
            self.runtime.status(p) is PartitionStatus.LOADING for p in range(self.runtime.num_partitions)
        )

    def partition_for(self, group_id: str) -> int:
        return partition_for_key(group_id, self.runtime.num_partitions)

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group object (tests and the CLI's describe use it read-only)."""
        return self._groups.get(group_id)

    # -- operations ----------------------------------------------------------------------------------

    def _operation(self, fn: Callable[[], T]) -> Callable[[], CoordinatorResult[T]]:
        def op() -> CoordinatorResult[T]:
            if self._writes is not None:
                raise RuntimeError("a group operation started inside another")
            self._writes = writes = _Writes()
            try:
                response = fn()
            finally:
                self._writes = None
            return writes.result(response)

        return op

    def _run(self, group_id: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` as an operation of ``group_id``'s partition; its answer may be returned (or
        sent) once its partition is committed up to ``runtime.last_written_offset``."""
        return self.runtime.write(self.partition_for(group_id), self._operation(fn))  # type: ignore[return-value]

    def _emit(
        self,
        records: list[Record],
        on_written: Callable[[], None] | None = None,
        on_failed: Callable[[KafkaError], None] | None = None,
    ) -> None:
        writes = self._writes
        if writes is None:
            log.error("records emitted outside an operation were dropped: %d records", len(records))
            return
        writes.records.extend(records)
        if on_written is not None:
            writes.written.append(on_written)
        if on_failed is not None:
            writes.failed.append(on_failed)

    def _store_group(
        self,
        group: GroupMetadata,
        value: fmt.GroupValue,
        on_written: Callable[[], None] | None,
        on_failed: Callable[[KafkaError], None] | None,
    ) -> None:
        key = fmt.encode_group_key(fmt.GroupKey(group.group_id))
        self._emit([(key, fmt.encode_group_value(value))], on_written, on_failed)

    def _emit_consumer_group(
        self, group_id: str, records: list[Record], on_written: Callable[[], None] | None
    ) -> None:
        self._emit(records, on_written)

    def _classic_timer(
        self, group: GroupMetadata, delay_ms: int, callback: Callable[[], None]
    ) -> TimerHandle:
        return self.runtime.schedule_timer(
            self.partition_for(group.group_id), delay_ms, self._operation(callback), retry=False
        )

    def _consumer_timer(self, group_id: str, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        # Fencing a member must happen: if its write fails, the timer runs again.
        return self.runtime.schedule_timer(self.partition_for(group_id), delay_ms, self._operation(callback))

    def _held(
        self, group_id: str, respond: Callable[[T], None], lost: Callable[[KafkaError], T]
    ) -> Callable[[T], None]:
        """``respond``, delivered once what the operation answering it wrote is committed (or ``lost``
        if the partition is unloaded first); a second answer to the same request is dropped."""
        partition = self.partition_for(group_id)
        answered = False

        def deliver(result: T) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            self.runtime.hold(partition, lambda error: respond(result if error is None else lost(error)))

        return deliver

    # -- the runtime's shard -------------------------------------------------------------------------

    def replay(self, partition: int, batch: StoredBatch) -> None:
        if batch.control:
            self._offsets.complete_txn(batch.producer_id, batch.commit)
            return
        for raw_key, raw_value in batch.records:
            try:
                self._replay_record(partition, raw_key, raw_value, batch)
            except KafkaError as exc:
                # One unreadable record must not lose every other group on this partition.
                log.warning("skipping unreadable __consumer_offsets record: %s", exc)

    def _replay_record(
        self, partition: int, raw_key: bytes, raw_value: bytes | None, batch: StoredBatch
    ) -> None:
        key = fmt.decode_key(raw_key)
        if isinstance(key, cg.ConsumerGroupKey):
            if key.record_type != cg.PARTITION_METADATA:  # recomputed from the topics
                self.consumer_groups.replay(key, raw_value)
            return
        if isinstance(key, fmt.GroupKey):
            if raw_value is None:
                self._remove_classic_group(key.group_id)
            elif self.runtime.status(partition) is PartitionStatus.LOADING:
                value = fmt.decode_group_value(raw_value)
                self._groups[key.group_id] = GroupMetadata.from_record(key.group_id, value, self._now())
            return
        group_id, tp = key.group_id, (key.topic, key.partition)
        if raw_value is None:
            self._offsets.remove(group_id, tp)
            self._offsets.remove_pending(group_id, tp)
            return
        v = fmt.decode_offset_value(raw_value)
        value = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
        if group_id not in self._groups and self.consumer_groups.get(group_id) is None:
            # Offsets without group management: a "simple" group, an Empty classic one (Kafka's rule).
            self._groups[group_id] = GroupMetadata(group_id, self._now())
        if batch.transactional and batch.producer_id >= 0:
            self._offsets.put_pending(batch.producer_id, group_id, tp, value)
        else:
            self._offsets.put(group_id, tp, value)

    def _remove_classic_group(self, group_id: str) -> None:
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        self._membership.shutdown_group(group)
        group.transition(GroupEvent.DELETE, self._now())
        log.info("group %s deleted", group_id)

    def on_loaded(self, partition: int) -> None:
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            classic, consumer = self._groups[group_id], self.consumer_groups.get(group_id)
            if consumer is None:
                continue
            if classic.is_in(S.EMPTY):
                del self._groups[group_id]  # offsets of a consumer-protocol group
            else:
                self.consumer_groups.forget(group_id)  # the classic group is the live one
        for group in [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]:
            for member in group.members.values():
                self._membership.schedule_loaded_member(group, member)
        for group in self.consumer_groups.all():
            if self.partition_for(group.group_id) != partition:
                continue
            if cg.ConsumerGroupKey(cg.GROUP_EPOCH, group.group_id) not in group.persisted:
                log.warning("group %s: consumer group records without a group epoch; ignored", group.group_id)
                self.consumer_groups.forget(group.group_id)
            else:
                self.consumer_groups.loaded(group.group_id)
        if self._expiry_started:
            self._schedule_expiry(partition)

    def on_unloaded(self, partition: int) -> None:
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            self._membership.unload_group(self._groups.pop(group_id))
        for group in self.consumer_groups.all():
            if self.partition_for(group.group_id) == partition:
                self.consumer_groups.forget(group.group_id)
        for group_id in self._offsets.group_ids():
            if self.partition_for(group_id) == partition:
                self._offsets.remove_group(group_id)

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # -- membership ----------------------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848). A classic group with members keeps its id (Kafka answers
        GROUP_ID_NOT_FOUND); an empty classic group, such as one that only has committed offsets,
        becomes a consumer group (its metadata tombstone goes in the same batch). Raises
        :class:`KafkaError` with the answer's code."""
        return self._run(req.group_id, lambda: self._consumer_group_heartbeat(req))

    def _consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        classic = self._groups.get(req.group_id)
        if classic is not None and not classic.is_in(S.EMPTY) and not classic.is_in(S.DEAD):
            raise KafkaError(f"group {req.group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
        creating = self.consumer_groups.get(req.group_id) is None
        result = self.consumer_groups.heartbeat(req)
        if classic is not None and creating and req.member_epoch == 0:
            self._emit([_group_tombstone(req.group_id)])
        return result

    def join_group(self, req: JoinRequest, respond: JoinCallback) -> None:
        try:
            self.runtime.check_active(self.partition_for(req.group_id))
        except KafkaError as exc:
            respond(JoinResult(exc.code, req.member_id))
            return
        respond = self._held(req.group_id, respond, lambda e: JoinResult(e.code, req.member_id))
        try:
            consumer_group = self.consumer_groups.get(req.group_id)
            if consumer_group is not None:
                if consumer_group.members:
                    respond(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
                    return
                # An empty consumer group turns classic: its records go first, in an operation of its own.
                self._run(req.group_id, lambda: self.consumer_groups.delete(req.group_id))
            self._run(req.group_id, lambda: self._join_group(req, respond))
        except KafkaError as exc:
            respond(JoinResult(exc.code, req.member_id))

    def _join_group(self, req: JoinRequest, respond: JoinCallback) -> None:
        if not _valid_group_id(req.group_id, allow_empty=False):
            respond(JoinResult(E.INVALID_GROUP_ID, req.member_id))
            return
        if not (
            self.config.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            respond(JoinResult(E.INVALID_SESSION_TIMEOUT, req.member_id))
            return
        if sum(len(m) for _, m in req.protocols) > self.config.group_max_member_metadata_bytes:
            log.warning("group %s: JoinGroup metadata from %s too large", req.group_id, req.client_id)
            respond(JoinResult(E.INVALID_REQUEST, req.member_id))
            return
        if req.rebalance_timeout_ms < 0:  # JoinGroup v0 has no rebalance timeout: Kafka uses the session's
            req = dataclasses.replace(req, rebalance_timeout_ms=req.session_timeout_ms)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                respond(JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id))
                return
            # Kept in memory until its first generation is stored (as Kafka's classic groups).
            group = self._groups[req.group_id] = GroupMetadata(req.group_id, self._now())
        self._membership.join(group, req, respond)

    def sync_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        assignments: dict[str, bytes],
        respond: SyncCallback,
        *,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> None:
        try:
            self.runtime.check_active(self.partition_for(group_id))
        except KafkaError as exc:
            respond(SyncResult(exc.code))
            return
        respond = self._held(group_id, respond, lambda e: SyncResult(e.code))

        def sync() -> None:
            if not _valid_group_id(group_id, allow_empty=False):
                respond(SyncResult(E.INVALID_GROUP_ID))
                return
            group = self._groups.get(group_id)
            if group is None:
                respond(SyncResult(E.UNKNOWN_MEMBER_ID))
                return
            self._membership.sync(
                group,
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
                respond,
            )

        try:
            self._run(group_id, sync)
        except KafkaError as exc:
            respond(SyncResult(exc.code))

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        def beat() -> ErrorCode:
            if not _valid_group_id(group_id, allow_empty=False):
                return E.INVALID_GROUP_ID
            group = self._groups.get(group_id)
            if group is None:
                return E.UNKNOWN_MEMBER_ID
            return self._membership.heartbeat(group, member_id, group_instance_id, generation_id)

        try:
            return self._run(group_id, beat)
        except KafkaError as exc:
            return exc.code

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Returns the top-level error and one error per leaving member."""

        def leave() -> tuple[ErrorCode, list[ErrorCode]]:
            if not _valid_group_id(group_id, allow_empty=False):
                return E.INVALID_GROUP_ID, []
            group = self._groups.get(group_id)
            if group is None:
                return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
            if group.is_in(S.DEAD):
                return E.COORDINATOR_NOT_AVAILABLE, []
            return E.NONE, self._membership.leave(group, members)

        try:
            return self._run(group_id, leave)
        except KafkaError as exc:
            return exc.code, []

    # -- offsets -------------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
        *,
        api_version: int = FIRST_MEMBER_EPOCH_COMMIT_VERSION,
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Validate, append to ``__consumer_offsets``, then make visible. Returns (top error, per partition).

        A top-level error applies to every partition (the handler copies it into each). A failed
        append answers every partition with the mapped (retriable) error and stores nothing.
        ``api_version`` is the OffsetCommit request's: a member of a consumer-protocol group must
        commit with v9+ (UNSUPPORTED_VERSION below, see :meth:`ConsumerGroups.check_offset_commit`),
        and a commit with a generation to a group we do not have is GROUP_ID_NOT_FOUND from v9,
        ILLEGAL_GENERATION below (see :func:`unknown_group_commit_error`). Raises
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when the group's partition is not served here.
        """
        self.runtime.check_active(self.partition_for(group_id))
        try:
            return self._run(
                group_id,
                lambda: self._commit_offsets(
                    group_id, member_id, group_instance_id, generation_id, offsets, api_version
                ),
            )
        except KafkaError as exc:
            return E.NONE, dict.fromkeys(offsets, exc.code)

    def _commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
        api_version: int,
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if not _valid_group_id(group_id, allow_empty=True):
            return E.INVALID_GROUP_ID, {}
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer_groups.check_offset_commit(
                consumer_group,
                member_id,
                group_instance_id,
                generation_id,
                transactional=False,
                api_version=api_version,
            )
            if error is not E.NONE:
                return error, {}
        else:
            group = self._groups.get(group_id)
            if group is None:  # the commit's replay creates it (a group without group management)
                error = unknown_group_commit_error(
                    generation_id, transactional=False, api_version=api_version
                )
            else:
                error = self._membership.check_commit_member(
                    group, member_id, group_instance_id, generation_id
                )
                if error is E.NONE:
                    self._membership.touch(group, member_id)
            if error is not E.NONE:
                return error, {}
        now = self._now()
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            if not self._partition_exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                records.append(
                    _offset_record(
                        group_id, tp, CommittedOffset(entry.offset, entry.leader_epoch, metadata, now)
                    )
                )
                results[tp] = E.NONE
        self._emit(records)
        return E.NONE, results

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: append as a transactional batch of the producer; the offsets stay pending
        until the producer's marker (:meth:`complete_transaction`). Generation fencing (KIP-447) is for
        the caller to check with :meth:`check_txn_member` first. Raises the mapped error of a failed
        append, or COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR."""

        def commit() -> dict[TopicPartition, ErrorCode]:
            now = self._now()
            results: dict[TopicPartition, ErrorCode] = {}
            records: list[Record] = []
            for tp, entry in offsets.items():
                if not self._partition_exists(*tp):
                    results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                value = CommittedOffset(entry.offset, entry.leader_epoch, entry.metadata or "", now)
                records.append(_offset_record(group_id, tp, value))
                results[tp] = E.NONE
            if records and self._writes is not None:
                self._writes.batch = StoredBatch(
                    tuple(records), producer_id, producer_epoch, transactional=True
                )
            return results

        return self._run(group_id, commit)

    def check_txn_member(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """KIP-447 fencing for TxnOffsetCommit: a zombie from an old generation is rejected (see
        :meth:`Membership.check_txn_commit_member`). A group we do not know accepts a commit without
        a generation (:meth:`commit_txn_offsets` creates the group) and answers any generation
        ILLEGAL_GENERATION, at every version (:func:`unknown_group_commit_error`)."""

        def check() -> ErrorCode:
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                return self.consumer_groups.check_offset_commit(
                    consumer_group, member_id, group_instance_id, generation_id, transactional=True
                )
            group = self._groups.get(group_id)
            if group is None:
                return unknown_group_commit_error(generation_id, transactional=True)
            return self._membership.check_txn_commit_member(
                group, member_id, group_instance_id, generation_id
            )

        return self.runtime.read(self.partition_for(group_id), check)

    def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> None:
        """A transaction coordinator's COMMIT/ABORT marker for ``partition`` (WriteTxnMarkers): written
        as an operation of the partition, whose replay publishes or drops the producer's pending
        offsets. Raises the mapped error of a failed append."""
        batch = marker_batch(producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch)
        self.runtime.write(partition, lambda: CoordinatorResult(batch=batch))
        log.debug(
            "producer %d %s on __consumer_offsets-%d",
            producer_id,
            "committed" if commit else "aborted",
            partition,
        )

    def on_txn_marker(self, producer_id: int, commit: bool) -> None:
        """A marker written to ``__consumer_offsets`` other than through :meth:`complete_transaction`
        (a test's own append): apply it as replay applies one."""
        self._offsets.complete_txn(producer_id, commit)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, list[tuple[TopicPartition, CommittedOffset | None, ErrorCode]]]:
        """Committed offsets of a group (``partitions=None``: all of them). Missing ones come back
        as ``None`` with no error, as in Kafka; with ``require_stable``, a partition with a pending
        transactional commit answers UNSTABLE_OFFSET_COMMIT. ``member_id``/``member_epoch``
        (OffsetFetch v9) are checked for consumer-protocol groups."""

        def fetch() -> tuple[ErrorCode, list[tuple[TopicPartition, CommittedOffset | None, ErrorCode]]]:
            if not _valid_group_id(group_id, allow_empty=True):
                return E.INVALID_GROUP_ID, []
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                error = self.consumer_groups.check_offset_fetch(consumer_group, member_id, member_epoch)
                if error is not E.NONE:
                    return error, []
            wanted = sorted(self._offsets.all_for(group_id)) if partitions is None else partitions
            out = []
            for tp in wanted:
                if require_stable and self._offsets.has_pending(group_id, tp):
                    out.append((tp, None, E.UNSTABLE_OFFSET_COMMIT))
                else:
                    out.append((tp, self._offsets.get(group_id, tp), E.NONE))
            return E.NONE, out

        return self.runtime.read(self.partition_for(group_id), fetch)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only for partitions no live member of the group subscribes to."""
        self.runtime.check_active(self.partition_for(group_id))

        def delete() -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
            if not _valid_group_id(group_id, allow_empty=False):
                return E.INVALID_GROUP_ID, {}
            consumer_group = self.consumer_groups.get(group_id)
            group = self._groups.get(group_id)
            if consumer_group is not None:
                subscribed: set[str] = (
                    consumer_group.subscribed_topic_names() if consumer_group.members else set()
                )
            elif group is None or group.is_in(S.DEAD):
                return E.GROUP_ID_NOT_FOUND, {}
            elif group.is_in(S.EMPTY):
                subscribed = set()
            elif group.protocol_type == "consumer" and group.is_in(S.STABLE):
                maybe_subscribed = subscribed_topics(group)
                if maybe_subscribed is None:
                    return E.NON_EMPTY_GROUP, {}
                subscribed = maybe_subscribed
            else:
                return E.NON_EMPTY_GROUP, {}
            results: dict[TopicPartition, ErrorCode] = {}
            for tp in partitions:
                if tp[0] in subscribed:
                    results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    results[tp] = E.NONE
                    if self._offsets.get(group_id, tp) is not None:
                        self._emit([_offset_tombstone(group_id, tp)])
            return E.NONE, results

        try:
            return self._run(group_id, delete)
        except KafkaError as exc:
            return exc.code, {}

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget every group's offsets of deleted partitions, committed and pending, as Kafka's
        coordinator does: a topic created again under the same name must not start its groups at the
        old topic's offsets (a consumer would skip the new records below them). An Empty group left
        with no offsets is deleted, as when its offsets expire. Returns how many offsets went."""
        gone = set(partitions)
        if not gone:
            return 0
        removed = 0
        for partition in self.runtime.active_partitions():

            def forget(partition: int = partition) -> int:
                count = 0
                for group_id in sorted(self._offsets.group_ids()):
                    if self.partition_for(group_id) != partition:
                        continue
                    doomed = (
                        set(self._offsets.all_for(group_id)) | self._offsets.pending_partitions(group_id)
                    ) & gone
                    if doomed:
                        self._emit([_offset_tombstone(group_id, tp) for tp in sorted(doomed)])
                        count += len(doomed)
                        log.info("group %s: %d offsets of deleted partitions removed", group_id, len(doomed))
                    self._delete_if_unused(group_id, doomed)
                return count

            try:
                removed += self.runtime.write(partition, self._operation(forget)) or 0
            except KafkaError as exc:
                log.warning(
                    "__consumer_offsets-%d: removing offsets of deleted partitions failed: %s", partition, exc
                )
        return removed

    def _delete_if_unused(self, group_id: str, going: set[TopicPartition]) -> None:
        """Delete a group that will have neither offsets (once ``going`` are removed) nor members (an
        Empty classic group, a consumer group without members), as Kafka does once its offsets
        expire or their topic is deleted."""
        left = set(self._offsets.all_for(group_id)) | self._offsets.pending_partitions(group_id)
        if left - going:
            return
        group = self._groups.get(group_id)
        if group is not None and group.is_in(S.EMPTY):
            self._emit([_group_tombstone(group_id)])
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None and not consumer_group.members:
            self.consumer_groups.delete(group_id)

    # -- admin ---------------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        def describe() -> GroupDescription:
            consumer_group = self.consumer_groups.get(group_id)
            if consumer_group is not None:
                return describe_consumer_group(consumer_group)
            group = self._groups.get(group_id)
            return not_found(group_id) if group is None else describe_classic_group(group)

        return self.runtime.read(self.partition_for(group_id), describe)

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """ConsumerGroupDescribe: the live consumer-protocol group (read-only). A classic or unknown
        group is GROUP_ID_NOT_FOUND, on which clients fall back to DescribeGroups."""

        def find() -> ConsumerGroup:
            group = self.consumer_groups.get(group_id)
            if group is None:
                raise KafkaError(f"group {group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
            return group

        return self.runtime.read(self.partition_for(group_id), find)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """ListGroups over every partition served here (COORDINATOR_LOAD_IN_PROGRESS while one loads)."""
        if self.loading:
            raise CoordinatorLoadInProgress("the group coordinator is loading __consumer_offsets")
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listings = []
        if not wanted_types or "classic" in wanted_types:
            listings += [
                GroupListing(g.group_id, g.protocol_type or "", g.state.kafka_name)
                for g in self._groups.values()
                if not g.is_in(S.DEAD)
            ]
        if not wanted_types or "consumer" in wanted_types:
            listings += [
                GroupListing(g.group_id, "consumer", g.state.value, "consumer")
                for g in self.consumer_groups.all()
            ]
        return [g for g in listings if not wanted_states or g.state.lower() in wanted_states]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: each group in an operation of its own partition (offset tombstones and the
        group's tombstones in one batch; their replay removes it)."""
        results = {}
        for group_id in group_ids:
            if not _valid_group_id(group_id, allow_empty=True):
                results[group_id] = E.INVALID_GROUP_ID
                continue
            try:
                results[group_id] = self._run(group_id, lambda g=group_id: self._delete_group(g))
            except KafkaError as exc:
                results[group_id] = exc.code
        return results

    def _delete_group(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return E.NON_EMPTY_GROUP
        elif group is None or group.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND
        elif not group.is_in(S.EMPTY):
            return E.NON_EMPTY_GROUP
        tps = set(self._offsets.all_for(group_id)) | self._offsets.pending_partitions(group_id)
        self._emit([_offset_tombstone(group_id, tp) for tp in sorted(tps)])
        if consumer_group is not None:
            self.consumer_groups.delete(group_id)
        else:
            self._emit([_group_tombstone(group_id)])
        return E.NONE

    # -- offset expiry -------------------------------------------------------------------------------

    def expire_offsets(self) -> int:
        """Expire offsets on every loaded partition now (see :mod:`.offset_expiry`); an Empty group
        left with no offsets is deleted. Returns how many offsets expired."""
        expired = 0
        for partition in self.runtime.active_partitions():
            try:
                expired += (
                    self.runtime.write(partition, self._operation(lambda p=partition: self._expire(p))) or 0
                )
            except KafkaError as exc:
                log.warning("__consumer_offsets-%d: offset expiry failed: %s", partition, exc)
        return expired

    def _expire(self, partition: int) -> int:
        now, retention = self._now(), self.config.offsets_retention_ms
        expired_total = 0
        groups: list[GroupMetadata | ConsumerGroup] = [
            *self._groups.values(),
            *self.consumer_groups.all(),
        ]
        for group in groups:
            group_id = group.group_id
            if self.partition_for(group_id) != partition:
                continue
            offsets = self._offsets.all_for(group_id)
            if isinstance(group, GroupMetadata):
                expired = expired_of_classic_group(group, offsets, now, retention)
                check_unused = group.is_in(S.EMPTY)
            else:
                expired = expired_of_consumer_group(group, offsets, now, retention)
                check_unused = True
            if expired:
                self._emit([_offset_tombstone(group_id, tp) for tp in expired])
                expired_total += len(expired)
                log.info("group %s: %d offsets expired", group_id, len(expired))
            if check_unused:
                self._delete_if_unused(group_id, set(expired))
        return expired_total

    def _schedule_expiry(self, partition: int) -> None:
        interval = self.config.offsets_retention_check_interval_ms

        def expire() -> int:
            self.runtime.schedule_timer(
                partition, interval, self._operation(expire), key=_EXPIRY_TIMER, retry=False
            )
            return self._expire(partition)

        self.runtime.schedule_timer(
            partition, interval, self._operation(expire), key=_EXPIRY_TIMER, retry=False
        )
