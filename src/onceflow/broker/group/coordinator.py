"""The group coordinator: every group of this broker, their committed offsets, and their persistence.

Entry points mirror the Kafka APIs (one handler module each calls one of these). Membership rules
live in :mod:`~onceflow.broker.group.membership`; this module owns the group registry, validation
that needs the registry, ``__consumer_offsets`` writes and replay, and offset expiry.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

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
from onceflow.broker.group.membership import Membership
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offsets import CommittedOffset, OffsetStore, TopicPartition
from onceflow.broker.group.persistence import OffsetsTopic, Record
from onceflow.broker.group.replay import replay_partition
from onceflow.broker.group.requests import JoinCallback, JoinRequest, JoinResult, SyncCallback, SyncResult
from onceflow.broker.group.scheduler import Scheduler, TimerHandle
from onceflow.broker.group.state import GroupEvent, GroupState
from onceflow.broker.group.subscriptions import subscribed_topics
from onceflow.protocol.errors import CoordinatorLoadInProgress, ErrorCode, KafkaError

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer": a group of the KIP-848 protocol


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


class GroupCoordinator:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        scheduler: Scheduler,
        topic: OffsetsTopic,
        *,
        partition_exists: Callable[[str, int], bool] = lambda topic, partition: True,
        topic_lookup: TopicLookup | None = None,
    ) -> None:
        self.config = config
        self._scheduler = scheduler
        self._topic = topic
        self._partition_exists = partition_exists
        self._groups: dict[str, GroupMetadata] = {}
        self._offsets = OffsetStore()
        self._membership = Membership(config, scheduler, self._store_group)
        # Groups of the consumer protocol (KIP-848); a group id is in at most one of the two registries.
        self.consumer_groups = ConsumerGroups(
            config.consumer, scheduler, topic_lookup or _NoTopics(), persist=self._append_group_records
        )
        self._expiry_timer: TimerHandle | None = None
        self.loading = True

    # -- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild groups and offsets from ``__consumer_offsets``; until then APIs answer
        COORDINATOR_LOAD_IN_PROGRESS."""
        self.loading = True
        now = self._scheduler.now_ms()
        consumer_records: dict = {}
        for partition in range(self._topic.num_partitions):
            groups = replay_partition(self._topic.replay(partition), self._offsets, consumer_records)
            for group_id, value in groups.items():
                if value is None:
                    continue
                group = GroupMetadata.from_record(group_id, value, now)
                self._groups[group_id] = group
                for member in group.members.values():
                    self._membership.schedule_loaded_member(group, member)
        by_group: dict[str, dict] = {}
        for key, value in consumer_records.items():
            by_group.setdefault(key.group_id, {})[key] = value
        for group_id, records in by_group.items():
            classic = self._groups.get(group_id)
            if classic is not None and not classic.is_in(S.EMPTY):
                continue  # the classic group is the live one
            try:
                restored = self.consumer_groups.restore(group_id, records)
            except KafkaError as exc:
                log.warning(
                    "group %s: consumer group records unreadable (%s); members will rejoin", group_id, exc
                )
                continue
            if restored is not None:
                self._groups.pop(group_id, None)
        for group_id in self._offsets.group_ids():
            if self.consumer_groups.get(group_id) is None:
                self._groups.setdefault(group_id, GroupMetadata(group_id, now))
        self.loading = False
        log.info("group coordinator loaded %d groups", len(self._groups))

    def start_expiry(self) -> None:
        def tick() -> None:
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")
            self._expiry_timer = self._scheduler.call_later(
                self.config.offsets_retention_check_interval_ms, tick
            )

        self._expiry_timer = self._scheduler.call_later(self.config.offsets_retention_check_interval_ms, tick)

    def shutdown(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self.consumer_groups.shutdown()
        for group in self._groups.values():
            for timer in (group.join_timer, group.sync_timer):
                if timer is not None:
                    timer.cancel()
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()

    def partition_for(self, group_id: str) -> int:
        return fmt.partition_for_group(group_id, self._topic.num_partitions)

    def _check_loaded(self) -> None:
        if self.loading:
            raise CoordinatorLoadInProgress("the group coordinator is loading __consumer_offsets")

    def _append_group_records(self, group_id: str, records: list[Record]) -> None:
        self._topic.append(self.partition_for(group_id), records)

    def _store_group(self, group: GroupMetadata) -> None:
        record = (
            fmt.encode_group_key(fmt.GroupKey(group.group_id)),
            fmt.encode_group_value(group.to_record()),
        )
        self._topic.append(self.partition_for(group.group_id), [record])

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group object (tests and the CLI's describe use it read-only)."""
        return self._groups.get(group_id)

    # -- membership --------------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848). A classic group with members keeps its id (Kafka answers
        GROUP_ID_NOT_FOUND); an empty classic group, such as one that only has committed offsets,
        becomes a consumer group. Raises :class:`KafkaError` with the answer's code."""
        self._check_loaded()
        classic = self._groups.get(req.group_id)
        if classic is not None and not classic.is_in(S.EMPTY) and not classic.is_in(S.DEAD):
            raise KafkaError(f"group {req.group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
        result = self.consumer_groups.heartbeat(req)
        if classic is not None and self.consumer_groups.get(req.group_id) is not None:
            del self._groups[req.group_id]
        return result

    def join_group(self, req: JoinRequest, respond: JoinCallback) -> None:
        if self.loading:
            respond(JoinResult(E.COORDINATOR_LOAD_IN_PROGRESS, req.member_id))
            return
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            if consumer_group.members:
                respond(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
                return
            self.consumer_groups.delete(req.group_id)  # an empty consumer group turns classic
            self._groups[req.group_id] = GroupMetadata(req.group_id, self._scheduler.now_ms())
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
            group = self._groups[req.group_id] = GroupMetadata(req.group_id, self._scheduler.now_ms())
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
        if self.loading:
            respond(SyncResult(E.COORDINATOR_LOAD_IN_PROGRESS))
            return
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

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if not _valid_group_id(group_id, allow_empty=False):
            return E.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        return self._membership.heartbeat(group, member_id, group_instance_id, generation_id)

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Returns the top-level error and one error per leaving member."""
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, []
        if not _valid_group_id(group_id, allow_empty=False):
            return E.INVALID_GROUP_ID, []
        group = self._groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        return E.NONE, self._membership.leave(group, members)

    # -- offsets -----------------------------------------------------------------------------

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

        A top-level error applies to every partition (the handler copies it into each).
        ``api_version`` is the OffsetCommit request's: a member of a consumer-protocol group must
        commit with v9+ (UNSUPPORTED_VERSION below, see :meth:`ConsumerGroups.check_offset_commit`),
        and a commit with a generation to a group we do not have is GROUP_ID_NOT_FOUND from v9,
        ILLEGAL_GENERATION below (see :func:`unknown_group_commit_error`).
        """
        self._check_loaded()
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
            if group is None:
                error = unknown_group_commit_error(
                    generation_id, transactional=False, api_version=api_version
                )
                if error is not E.NONE:
                    return error, {}
                group = self._groups[group_id] = GroupMetadata(group_id, self._scheduler.now_ms())
            error = self._membership.check_commit_member(group, member_id, group_instance_id, generation_id)
            if error is not E.NONE:
                return error, {}
            self._membership.touch(group, member_id)
        now = self._scheduler.now_ms()
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            if not self._partition_exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                value = CommittedOffset(entry.offset, entry.leader_epoch, metadata, now)
                accepted[tp] = value
                records.append(self._offset_record(group_id, tp, value))
        if records:
            try:
                self._topic.append(self.partition_for(group_id), records)
            except Exception:
                log.exception("group %s: appending offsets failed", group_id)
                for tp in accepted:
                    results[tp] = E.UNKNOWN_SERVER_ERROR
                return E.NONE, results
            for tp, value in accepted.items():
                self._offsets.put(group_id, tp, value)
                results[tp] = E.NONE
        return E.NONE, results

    @staticmethod
    def _offset_record(group_id: str, tp: TopicPartition, value: CommittedOffset) -> Record:
        key = fmt.encode_offset_key(fmt.OffsetKey(group_id, tp[0], tp[1]))
        return key, fmt.encode_offset_value(
            fmt.OffsetValue(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp)
        )

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """The seam for TxnOffsetCommit (transactions issue): append as a transactional batch of the
        producer; the offsets stay pending until :meth:`on_txn_marker`. Generation fencing (KIP-447)
        is for the caller to check with :meth:`check_txn_member` first."""
        self._check_loaded()
        now = self._scheduler.now_ms()
        if group_id not in self._groups and self.consumer_groups.get(group_id) is None:
            self._groups[group_id] = GroupMetadata(group_id, now)  # it exists from now on (ListGroups)
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        accepted = {}
        for tp, entry in offsets.items():
            if not self._partition_exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            value = CommittedOffset(entry.offset, entry.leader_epoch, entry.metadata or "", now)
            accepted[tp] = value
            records.append(self._offset_record(group_id, tp, value))
        if records:
            self._topic.append(
                self.partition_for(group_id),
                records,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=True,
            )
            for tp, value in accepted.items():
                self._offsets.put_pending(producer_id, group_id, tp, value)
                results[tp] = E.NONE
        return results

    def check_txn_member(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """KIP-447 fencing for TxnOffsetCommit: a zombie from an old generation is rejected (see
        :meth:`Membership.check_txn_commit_member`). A group we do not know accepts a commit without
        a generation (:meth:`commit_txn_offsets` creates the group) and answers any generation
        ILLEGAL_GENERATION, at every version (:func:`unknown_group_commit_error`)."""
        self._check_loaded()
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.consumer_groups.check_offset_commit(
                consumer_group, member_id, group_instance_id, generation_id, transactional=True
            )
        group = self._groups.get(group_id)
        if group is None:
            return unknown_group_commit_error(generation_id, transactional=True)
        return self._membership.check_txn_commit_member(group, member_id, group_instance_id, generation_id)

    def on_txn_marker(self, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to ``__consumer_offsets``: publish or drop the producer's
        pending offsets."""
        visible = self._offsets.complete_txn(producer_id, commit)
        log.debug(
            "producer %d %s: %d offsets", producer_id, "committed" if commit else "aborted", len(visible)
        )

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
        self._check_loaded()
        if not _valid_group_id(group_id, allow_empty=True):
            return E.INVALID_GROUP_ID, []
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer_groups.check_offset_fetch(consumer_group, member_id, member_epoch)
            if error is not E.NONE:
                return error, []
        if partitions is None:
            partitions = sorted(self._offsets.all_for(group_id))
        out = []
        for tp in partitions:
            if require_stable and self._offsets.has_pending(group_id, tp):
                out.append((tp, None, E.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, self._offsets.get(group_id, tp), E.NONE))
        return E.NONE, out

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only for partitions no live member of the group subscribes to."""
        self._check_loaded()
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
        doomed = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = E.NONE
                if self._offsets.get(group_id, tp) is not None:
                    doomed.append(tp)
        if doomed:
            self._write_offset_tombstones(group_id, doomed)
        return E.NONE, results

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget every group's offsets of deleted partitions, committed and pending, as Kafka's
        coordinator does: a topic created again under the same name must not start its groups at the
        old topic's offsets (a consumer would skip the new records below them). An Empty group left
        with no offsets is deleted, as when its offsets expire. Returns how many offsets went."""
        gone = set(partitions)
        if self.loading or not gone:
            return 0
        removed = 0
        for group_id in sorted(self._offsets.group_ids()):
            for tp in gone:
                self._offsets.remove_pending(group_id, tp)
            doomed = [tp for tp in self._offsets.all_for(group_id) if tp in gone]
            if doomed:
                self._write_offset_tombstones(group_id, doomed)
                removed += len(doomed)
                log.info("group %s: %d offsets of deleted partitions removed", group_id, len(doomed))
            self._delete_if_unused(group_id)
        return removed

    def _delete_if_unused(self, group_id: str) -> None:
        """Delete a group that has neither offsets nor members (an Empty classic group, a consumer
        group without members), as Kafka does once its offsets expire or their topic is deleted."""
        if self._offsets.has_offsets(group_id):
            return
        group = self._groups.get(group_id)
        if group is not None and group.is_in(S.EMPTY):
            self._remove_group(group)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None and not consumer_group.members:
            self.consumer_groups.delete(group_id)

    def _write_offset_tombstones(
        self, group_id: str, tps: Iterable[TopicPartition], *, with_group: bool = False
    ) -> None:
        records: list[Record] = [(fmt.encode_offset_key(fmt.OffsetKey(group_id, t, p)), None) for t, p in tps]
        if with_group:
            records.append((fmt.encode_group_key(fmt.GroupKey(group_id)), None))
        if records:
            self._topic.append(self.partition_for(group_id), records)
        for tp in tps:
            self._offsets.remove(group_id, tp)

    # -- admin -------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        self._check_loaded()
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return _describe_consumer_group(consumer_group)
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(E.GROUP_ID_NOT_FOUND, group_id, S.DEAD.kafka_name, "", "")
        members = []
        stable = group.is_in(S.STABLE)
        for m in group.members.values():
            metadata = m.metadata_for(group.protocol_name) if stable and group.protocol_name else b""
            members.append(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    metadata,
                    m.assignment if stable else b"",
                )
            )
        return GroupDescription(
            E.NONE,
            group_id,
            group.state.kafka_name,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            tuple(members),
        )

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """ConsumerGroupDescribe: the live consumer-protocol group (read-only). A classic or unknown
        group is GROUP_ID_NOT_FOUND, on which clients fall back to DescribeGroups."""
        self._check_loaded()
        group = self.consumer_groups.get(group_id)
        if group is None:
            raise KafkaError(f"group {group_id} is not a consumer group", E.GROUP_ID_NOT_FOUND)
        return group

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        self._check_loaded()
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
        self._check_loaded()
        results = {}
        for group_id in group_ids:
            group = self._groups.get(group_id)
            consumer_group = self.consumer_groups.get(group_id)
            if not _valid_group_id(group_id, allow_empty=True):
                results[group_id] = E.INVALID_GROUP_ID
            elif consumer_group is not None:
                results[group_id] = self._delete_consumer_group(consumer_group)
            elif group is None or group.is_in(S.DEAD):
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif not group.is_in(S.EMPTY):
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                try:
                    self._remove_group(group)
                    results[group_id] = E.NONE
                except Exception:
                    log.exception("group %s: writing deletion failed", group_id)
                    results[group_id] = E.UNKNOWN_SERVER_ERROR
        return results

    def _delete_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        if group.members:
            return E.NON_EMPTY_GROUP
        try:
            self._write_offset_tombstones(group.group_id, list(self._offsets.all_for(group.group_id)))
        except Exception:
            log.exception("group %s: writing deletion failed", group.group_id)
            return E.UNKNOWN_SERVER_ERROR
        self._offsets.remove_group(group.group_id)
        self.consumer_groups.delete(group.group_id)
        log.info("group %s deleted", group.group_id)
        return E.NONE

    def _remove_group(self, group: GroupMetadata) -> None:
        tps = list(self._offsets.all_for(group.group_id))
        self._write_offset_tombstones(group.group_id, tps, with_group=True)
        self._membership.shutdown_group(group)
        group.transition(GroupEvent.DELETE, self._scheduler.now_ms())
        self._offsets.remove_group(group.group_id)
        del self._groups[group.group_id]
        log.info("group %s deleted", group.group_id)

    def expire_offsets(self) -> int:
        """offsets.retention.minutes, with Kafka's three cases (KIP-211, KIP-496):

        - an Empty group with group management: every offset expires ``retention`` after the group
          became Empty (members keep their offsets alive while they exist);
        - a group without group management (standalone commits): each offset ``retention`` after
          its commit;
        - a Stable consumer-protocol group: offsets of topics no member subscribes to any more,
          ``retention`` after their commit (KIP-496); if a subscription can't be read, none.

        An explicit expire timestamp (OffsetCommit v1) wins over all of them. An Empty group left
        with no offsets is deleted. Returns how many offsets expired."""
        if self.loading:
            return 0
        now = self._scheduler.now_ms()
        retention = self.config.offsets_retention_ms
        expired_total = 0
        for group in list(self._groups.values()):
            empty = group.is_in(S.EMPTY)
            still_subscribed: set[str] = set()
            if empty:
                since_empty = group.current_state_timestamp if group.protocol_type is not None else None
            elif group.protocol_type == "consumer" and group.is_in(S.STABLE):
                since_empty = None
                subscribed = subscribed_topics(group)
                if subscribed is None:
                    continue
                still_subscribed = subscribed
            else:
                continue
            expired = []
            for tp, value in self._offsets.all_for(group.group_id).items():
                if tp[0] in still_subscribed:
                    continue
                if value.expire_timestamp >= 0:
                    due = value.expire_timestamp
                elif since_empty is not None:
                    due = since_empty + retention
                else:
                    due = value.commit_timestamp + retention
                if due <= now:
                    expired.append(tp)
            if expired:
                self._write_offset_tombstones(group.group_id, expired)
                expired_total += len(expired)
                log.info("group %s: %d offsets expired", group.group_id, len(expired))
            if empty:
                self._delete_if_unused(group.group_id)
        for consumer_group in self.consumer_groups.all():
            expired_total += self._expire_consumer_group_offsets(consumer_group, now, retention)
        return expired_total

    def _expire_consumer_group_offsets(self, group: ConsumerGroup, now: int, retention: int) -> int:
        """Kafka's rule for consumer-protocol groups: an offset of a topic no member subscribes to
        expires ``retention`` after its commit; an empty group left without offsets is deleted."""
        subscribed = group.subscribed_topic_names() if group.members else set()
        expired = []
        for tp, value in self._offsets.all_for(group.group_id).items():
            if tp[0] in subscribed:
                continue
            due = (
                value.expire_timestamp if value.expire_timestamp >= 0 else value.commit_timestamp + retention
            )
            if due <= now:
                expired.append(tp)
        if expired:
            self._write_offset_tombstones(group.group_id, expired)
            log.info("group %s: %d offsets expired", group.group_id, len(expired))
        self._delete_if_unused(group.group_id)
        return len(expired)


def _describe_consumer_group(group: ConsumerGroup) -> GroupDescription:
    """DescribeGroups of a consumer-protocol group, in the classic form Kafka gives it: protocol type
    "consumer", no protocol name, each member's subscription and current assignment encoded as the
    classic ConsumerProtocol bytes, so that tools written for classic groups show them."""
    members = []
    for m in group.members.values():
        subscription = ConsumerProtocolSubscription(
            topics=sorted(m.subscribed_topic_names), user_data=None, owned_partitions=[], generation_id=-1
        )
        assigned = ConsumerProtocolAssignment(
            assigned_partitions=[
                ConsumerProtocolAssignment.TopicPartition(topic=name, partitions=sorted(parts))
                for topic_id, parts in sorted(m.assignment.assigned.items())
                if (name := group.topic_name(topic_id)) is not None
            ],
            user_data=None,
        )
        members.append(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                bytes(subscription.encode(version=0)),
                bytes(assigned.encode(version=0)),
            )
        )
    return GroupDescription(E.NONE, group.group_id, group.state.value, "consumer", "", tuple(members))
