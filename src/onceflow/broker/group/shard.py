"""The group coordinator's shard: the groups and offsets of the ``__consumer_offsets`` partitions this
broker has loaded, what each operation does to them, and how their records replay.

An operation (:meth:`GroupShard.operation` wraps one) reads the state and emits records: offset
commits, tombstones, a classic group's metadata, a consumer group's records, a transaction marker. The
runtime appends them as one batch when the operation ends and replays them here with
:meth:`GroupShard.replay`, the same replay that loads a partition. Nothing here talks to the runtime
about writing; :class:`~onceflow.broker.group.coordinator.GroupCoordinator` runs the operations.

Replay, as Kafka's ``GroupMetadataManager`` / ``OffsetMetadataManager``:

- an offset commit goes into the :class:`OffsetStore` (a transactional one stays pending for its
  producer until the COMMIT or ABORT marker), and a group that commits without existing becomes an
  Empty classic group; an offset tombstone removes the committed and pending offset of that partition;
- a consumer-protocol group's records rebuild it (:meth:`ConsumerGroups.replay`);
- a classic group's tombstone deletes it; its metadata record is applied only while loading: it is
  written by the operation that changes the group in memory (:mod:`.membership`), as Kafka writes it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from onceflow.broker.coordinator.partitioning import partition_for_key
from onceflow.broker.coordinator.records import CoordinatorResult, Record, StoredBatch
from onceflow.broker.coordinator.runtime import CoordinatorRuntime, PartitionStatus
from onceflow.broker.coordinator.scheduler import Scheduler, TimerHandle
from onceflow.broker.group import consumer_group_records as cg
from onceflow.broker.group import log_format as fmt
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_group import ConsumerGroup, HeartbeatRequest, HeartbeatResult, TopicLookup
from onceflow.broker.group.consumer_groups import ConsumerGroups
from onceflow.broker.group.descriptions import (
    GroupDescription,
    GroupListing,
    describe_classic_group,
    describe_consumer_group,
    not_found,
)
from onceflow.broker.group.membership import Membership
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offset_operations import (
    OffsetOperations,
    group_tombstone,
    offset_tombstone,
    valid_group_id,
)
from onceflow.broker.group.offsets import CommittedOffset, OffsetStore
from onceflow.broker.group.requests import JoinCallback, JoinRequest, JoinResult, SyncCallback, SyncResult
from onceflow.broker.group.state import GroupEvent, GroupState
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState
T = TypeVar("T")

_EXPIRY_TIMER = "offset-expiry"


class _NoTopics:
    def topic(self, name: str):
        return None

    def topic_names(self):
        return ()


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


class GroupShard(OffsetOperations):
    """The state of the loaded partitions and the operations on it (the runtime's shard)."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        scheduler: Scheduler,
        *,
        partition_exists: Callable[[str, int], bool],
        topic_lookup: TopicLookup | None,
    ) -> None:
        self.config = config
        self._scheduler = scheduler
        self._partition_exists = partition_exists
        self.groups: dict[str, GroupMetadata] = {}  # classic groups
        self.offsets = OffsetStore()
        self._writes: _Writes | None = None
        self.expiry_started = False
        self._runtime: CoordinatorRuntime | None = None
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

    @property
    def runtime(self) -> CoordinatorRuntime:
        if self._runtime is None:
            raise RuntimeError("the group shard has no runtime yet")
        return self._runtime

    def attach(self, runtime: CoordinatorRuntime) -> None:
        self._runtime = runtime

    def partition_for(self, group_id: str) -> int:
        return partition_for_key(group_id, self.runtime.num_partitions)

    # -- operations ----------------------------------------------------------------------------------

    def operation(self, fn: Callable[[], T]) -> Callable[[], CoordinatorResult[T]]:
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
            self.partition_for(group.group_id), delay_ms, self.operation(callback), retry=False
        )

    def _consumer_timer(self, group_id: str, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        # Fencing a member must happen: if its write fails, the timer runs again.
        return self.runtime.schedule_timer(self.partition_for(group_id), delay_ms, self.operation(callback))

    # -- the runtime's shard -------------------------------------------------------------------------

    def replay(self, partition: int, batch: StoredBatch) -> None:
        if batch.control:
            self.offsets.complete_txn(batch.producer_id, batch.commit)
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
                self.groups[key.group_id] = GroupMetadata.from_record(key.group_id, value, self._now())
            return
        group_id, tp = key.group_id, (key.topic, key.partition)
        if raw_value is None:
            self.offsets.remove(group_id, tp)
            self.offsets.remove_pending(group_id, tp)
            return
        v = fmt.decode_offset_value(raw_value)
        value = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
        if group_id not in self.groups and self.consumer_groups.get(group_id) is None:
            # Offsets without group management: a "simple" group, an Empty classic one (Kafka's rule).
            self.groups[group_id] = GroupMetadata(group_id, self._now())
        if batch.transactional and batch.producer_id >= 0:
            self.offsets.put_pending(batch.producer_id, group_id, tp, value)
        else:
            self.offsets.put(group_id, tp, value)

    def _remove_classic_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        self._membership.shutdown_group(group)
        group.transition(GroupEvent.DELETE, self._now())
        log.info("group %s deleted", group_id)

    def on_loaded(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            classic, consumer = self.groups[group_id], self.consumer_groups.get(group_id)
            if consumer is None:
                continue
            if classic.is_in(S.EMPTY):
                del self.groups[group_id]  # offsets of a consumer-protocol group
            else:
                self.consumer_groups.forget(group_id)  # the classic group is the live one
        for group in [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]:
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
        if self.expiry_started:
            self.schedule_expiry(partition)

    def on_unloaded(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            self._membership.unload_group(self.groups.pop(group_id))
        for group in self.consumer_groups.all():
            if self.partition_for(group.group_id) == partition:
                self.consumer_groups.forget(group.group_id)
        for group_id in self.offsets.group_ids():
            if self.partition_for(group_id) == partition:
                self.offsets.remove_group(group_id)

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # -- membership ----------------------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848). A classic group with members keeps its id (Kafka answers
        GROUP_ID_NOT_FOUND); an empty classic group, such as one that only has committed offsets,
        becomes a consumer group (its metadata tombstone goes in the same batch). Raises
        :class:`KafkaError` with the answer's code."""
        classic = self.groups.get(req.group_id)
        if classic is not None and not classic.is_in(S.EMPTY) and not classic.is_in(S.DEAD):
            raise KafkaError(f"group {req.group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
        creating = self.consumer_groups.get(req.group_id) is None
        result = self.consumer_groups.heartbeat(req)
        if classic is not None and creating and req.member_epoch == 0:
            self._emit([group_tombstone(req.group_id)])
        return result

    def join(self, req: JoinRequest, respond: JoinCallback) -> None:
        if not valid_group_id(req.group_id, allow_empty=False):
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
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                respond(JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id))
                return
            # Kept in memory until its first generation is stored (as Kafka's classic groups).
            group = self.groups[req.group_id] = GroupMetadata(req.group_id, self._now())
        self._membership.join(group, req, respond)

    def sync(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        assignments: dict[str, bytes],
        respond: SyncCallback,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> None:
        if not valid_group_id(group_id, allow_empty=False):
            respond(SyncResult(E.INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
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

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if not valid_group_id(group_id, allow_empty=False):
            return E.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        return self._membership.heartbeat(group, member_id, group_instance_id, generation_id)

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        if not valid_group_id(group_id, allow_empty=False):
            return E.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        return E.NONE, self._membership.leave(group, members)

    # -- admin ---------------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return describe_consumer_group(consumer_group)
        group = self.groups.get(group_id)
        return not_found(group_id) if group is None else describe_classic_group(group)

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        group = self.consumer_groups.get(group_id)
        if group is None:
            raise KafkaError(f"group {group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
        return group

    def list_groups(self, states: Iterable[str], types: Iterable[str]) -> list[GroupListing]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listings = []
        if not wanted_types or "classic" in wanted_types:
            listings += [
                GroupListing(g.group_id, g.protocol_type or "", g.state.kafka_name)
                for g in self.groups.values()
                if not g.is_in(S.DEAD)
            ]
        if not wanted_types or "consumer" in wanted_types:
            listings += [
                GroupListing(g.group_id, "consumer", g.state.value, "consumer")
                for g in self.consumer_groups.all()
            ]
        return [g for g in listings if not wanted_states or g.state.lower() in wanted_states]

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return E.NON_EMPTY_GROUP
        elif group is None or group.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND
        elif not group.is_in(S.EMPTY):
            return E.NON_EMPTY_GROUP
        tps = set(self.offsets.all_for(group_id)) | self.offsets.pending_partitions(group_id)
        self._emit([offset_tombstone(group_id, tp) for tp in sorted(tps)])
        if consumer_group is not None:
            self.consumer_groups.delete(group_id)
        else:
            self._emit([group_tombstone(group_id)])
        return E.NONE
