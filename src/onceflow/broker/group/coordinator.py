"""The group coordinator: the groups of the ``__consumer_offsets`` partitions this broker has loaded,
their committed offsets, and the one way they change.

Every entry point that changes something is an *operation* of the group's partition on the coordinator
runtime (:mod:`onceflow.broker.coordinator.runtime`): :class:`~onceflow.broker.group.shard.GroupShard`
reads the state and emits records, the runtime appends them as one batch, replays them into the
shard (the replay that loads a partition), and releases the answers once the batch is committed. A
failed append changes nothing and answers Kafka's mapped error (NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE). Timers (classic members' sessions and rebalance phases, consumer-protocol
sessions and revocation deadlines, offset expiry) are operations too.

Entry points mirror the Kafka APIs (one handler module each calls one of these). Each answers at once
(sans-IO); the broker's :class:`~onceflow.broker.group.service.GroupService` holds the answers until
the runtime says their records are committed. JoinGroup and SyncGroup answer through callbacks, held
the same way here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from onceflow.broker.coordinator.records import CoordinatorResult, marker_batch
from onceflow.broker.coordinator.runtime import STARTUP_COORDINATOR_EPOCH, CoordinatorRuntime, PartitionStatus
from onceflow.broker.coordinator.scheduler import Scheduler
from onceflow.broker.coordinator.writer import PartitionWriter
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_group import (
    FIRST_MEMBER_EPOCH_COMMIT_VERSION,
    ConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
    TopicLookup,
)
from onceflow.broker.group.consumer_groups import ConsumerGroups
from onceflow.broker.group.descriptions import GroupDescription, GroupListing, MemberDescription
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offset_operations import OffsetCommitEntry, unknown_group_commit_error
from onceflow.broker.group.offsets import CommittedOffset, OffsetStore, TopicPartition
from onceflow.broker.group.requests import JoinCallback, JoinRequest, JoinResult, SyncCallback, SyncResult
from onceflow.broker.group.shard import GroupShard
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
T = TypeVar("T")


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
        self._shard = GroupShard(
            config, scheduler, partition_exists=partition_exists, topic_lookup=topic_lookup
        )
        self.runtime = CoordinatorRuntime(CONSUMER_OFFSETS_TOPIC, topic, self._shard, scheduler)
        self._shard.attach(self.runtime)
        # Until load(), every partition answers COORDINATOR_LOAD_IN_PROGRESS.
        for partition in range(self.runtime.num_partitions):
            self.runtime.begin_load(partition, STARTUP_COORDINATOR_EPOCH)

    # -- lifecycle -----------------------------------------------------------------------------------

    def load(self, owned: Mapping[int, int] | None = None) -> None:
        """Replay every partition of ``__consumer_offsets`` and serve them (one broker owns all), or,
        on a cluster, only the ``owned`` ones ({partition: coordinator epoch}, the partitions this
        broker leads); the others answer NOT_COORDINATOR until it leads them."""
        for partition in range(self.runtime.num_partitions):
            if owned is None:
                self.load_partition(partition, STARTUP_COORDINATOR_EPOCH)
            elif partition in owned:
                self.load_partition(partition, owned[partition])
            else:
                self.unload_partition(partition)
        groups = len(self._shard.groups) + len(self.consumer_groups.all())
        log.info("group coordinator loaded %d groups", groups)

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Become the coordinator of the groups of ``partition`` (after a failover: its new leader)."""
        self.runtime.load(partition, coordinator_epoch)

    def unload_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Stop being the coordinator of the groups of ``partition`` and forget them."""
        self.runtime.unload(partition, coordinator_epoch)

    def start_expiry(self) -> None:
        """Expire offsets every ``offsets.retention.check.interval.ms`` on each loaded partition."""
        self._shard.expiry_started = True
        for partition in self.runtime.active_partitions():
            self._shard.schedule_expiry(partition)

    def shutdown(self) -> None:
        self._shard.expiry_started = False
        self.runtime.unload_all()

    @property
    def loading(self) -> bool:
        return any(
            self.runtime.status(p) is PartitionStatus.LOADING for p in range(self.runtime.num_partitions)
        )

    def partition_for(self, group_id: str) -> int:
        return self._shard.partition_for(group_id)

    # -- read-only views (tests, the CLI's describe) -------------------------------------------------

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live classic group object."""
        return self._shard.groups.get(group_id)

    @property
    def classic_groups(self) -> dict[str, GroupMetadata]:
        return self._shard.groups

    @property
    def consumer_groups(self) -> ConsumerGroups:
        return self._shard.consumer_groups

    @property
    def offsets(self) -> OffsetStore:
        return self._shard.offsets

    # -- running operations --------------------------------------------------------------------------

    def _run(self, group_id: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` as an operation of ``group_id``'s partition; its answer may be returned (or
        sent) once its partition is committed up to ``runtime.last_written_offset``."""
        return self.runtime.write(self.partition_for(group_id), self._shard.operation(fn))  # type: ignore[return-value]

    def _read(self, group_id: str, fn: Callable[[], T]) -> T:
        return self.runtime.read(self.partition_for(group_id), fn)

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

    # -- membership ----------------------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848). A classic group with members keeps its id (Kafka answers
        GROUP_ID_NOT_FOUND); an empty classic group, such as one that only has committed offsets,
        becomes a consumer group. Raises :class:`KafkaError` with the answer's code."""
        return self._run(req.group_id, lambda: self._shard.consumer_group_heartbeat(req))

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
            self._run(req.group_id, lambda: self._shard.join(req, respond))
        except KafkaError as exc:
            respond(JoinResult(exc.code, req.member_id))

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
        try:
            self._run(
                group_id,
                lambda: self._shard.sync(
                    group_id,
                    member_id,
                    group_instance_id,
                    generation_id,
                    assignments,
                    respond,
                    protocol_type,
                    protocol_name,
                ),
            )
        except KafkaError as exc:
            respond(SyncResult(exc.code))

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        try:
            return self._run(
                group_id, lambda: self._shard.heartbeat(group_id, member_id, group_instance_id, generation_id)
            )
        except KafkaError as exc:
            return exc.code

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Returns the top-level error and one error per leaving member."""
        try:
            return self._run(group_id, lambda: self._shard.leave(group_id, members))
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
        ILLEGAL_GENERATION below (see :func:`unknown_group_commit_error`); without a generation it
        creates an empty classic group. Raises COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR when the
        group's partition is not served here.
        """
        self.runtime.check_active(self.partition_for(group_id))
        try:
            return self._run(
                group_id,
                lambda: self._shard.commit_offsets(
                    group_id, member_id, group_instance_id, generation_id, offsets, api_version
                ),
            )
        except KafkaError as exc:
            return E.NONE, dict.fromkeys(offsets, exc.code)

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
        return self._run(
            group_id, lambda: self._shard.commit_txn_offsets(group_id, producer_id, producer_epoch, offsets)
        )

    def check_txn_member(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """KIP-447 fencing for TxnOffsetCommit: a zombie from an old generation is rejected (see
        :meth:`Membership.check_txn_commit_member`). A group we do not know accepts a commit without
        a generation (:meth:`commit_txn_offsets` creates the group) and answers any generation
        ILLEGAL_GENERATION, at every version (:func:`unknown_group_commit_error`)."""
        return self._read(
            group_id,
            lambda: self._shard.check_txn_member(group_id, member_id, group_instance_id, generation_id),
        )

    def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> None:
        """A transaction coordinator's COMMIT/ABORT marker for ``partition`` (WriteTxnMarkers): written
        as an operation of the partition, whose replay publishes or drops the producer's pending
        offsets. Raises the mapped error of a failed append."""
        batch = marker_batch(producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch)
        self.runtime.write(partition, lambda: CoordinatorResult(batch=batch))

    def on_txn_marker(self, producer_id: int, commit: bool) -> None:
        """A marker written to ``__consumer_offsets`` other than through :meth:`complete_transaction`
        (a test's own append): apply it as replay applies one."""
        self._shard.offsets.complete_txn(producer_id, commit)

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
        return self._read(
            group_id,
            lambda: self._shard.fetch_offsets(group_id, partitions, require_stable, member_id, member_epoch),
        )

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only for partitions no live member of the group subscribes to."""
        self.runtime.check_active(self.partition_for(group_id))
        try:
            return self._run(group_id, lambda: self._shard.delete_offsets(group_id, partitions))
        except KafkaError as exc:
            return exc.code, {}

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget every group's offsets of deleted partitions, committed and pending, as Kafka's
        coordinator does: a topic created again under the same name must not start its groups at the
        old topic's offsets (a consumer would skip the new records below them). An Empty group left
        with no offsets is deleted, as when its offsets expire. Returns how many offsets went."""
        gone = set(partitions)
        removed = 0
        for partition in self.runtime.active_partitions() if gone else []:
            op = self._shard.operation(lambda p=partition: self._shard.forget_deleted_partitions(p, gone))
            try:
                removed += self.runtime.write(partition, op) or 0
            except KafkaError as exc:
                log.warning(
                    "__consumer_offsets-%d: removing offsets of deleted partitions failed: %s", partition, exc
                )
        return removed

    def expire_offsets(self) -> int:
        """Expire offsets on every loaded partition now (see :mod:`.offset_expiry`); an Empty group
        left with no offsets is deleted. Returns how many offsets expired."""
        expired = 0
        for partition in self.runtime.active_partitions():
            op = self._shard.operation(lambda p=partition: self._shard.expire(p))
            try:
                expired += self.runtime.write(partition, op) or 0
            except KafkaError as exc:
                log.warning("__consumer_offsets-%d: offset expiry failed: %s", partition, exc)
        return expired

    # -- admin ---------------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._read(group_id, lambda: self._shard.describe_group(group_id))

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """ConsumerGroupDescribe: the live consumer-protocol group (read-only). A classic or unknown
        group is GROUP_ID_NOT_FOUND, on which clients fall back to DescribeGroups."""
        return self._read(group_id, lambda: self._shard.consumer_group(group_id))

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """ListGroups over every partition served here (COORDINATOR_LOAD_IN_PROGRESS while one loads)."""
        if self.loading:
            raise CoordinatorLoadInProgress("the group coordinator is loading __consumer_offsets")
        return self._shard.list_groups(states, types)

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: each group in an operation of its own partition (offset tombstones and the
        group's tombstones in one batch; their replay removes it)."""
        results = {}
        for group_id in group_ids:
            if group_id is None:
                results[group_id] = E.INVALID_GROUP_ID
                continue
            try:
                results[group_id] = self._run(group_id, lambda g=group_id: self._shard.delete_group(g))
            except KafkaError as exc:
                results[group_id] = exc.code
        return results
