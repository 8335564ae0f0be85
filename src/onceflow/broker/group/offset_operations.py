"""The offsets half of the group coordinator's shard (Kafka's ``OffsetMetadataManager``): committing,
fetching, deleting and expiring a group's offsets, as operations that emit records.

:class:`OffsetOperations` is mixed into :class:`~onceflow.broker.group.shard.GroupShard`, which owns the
state these read (its classic groups, consumer groups and :class:`OffsetStore`) and replays the
records they emit; nothing here changes that state.
"""

from __future__ import annotations

import dataclasses
import logging

from onceflow.broker.coordinator.records import Record, StoredBatch
from onceflow.broker.group import log_format as fmt
from onceflow.broker.group.consumer_group import FIRST_MEMBER_EPOCH_COMMIT_VERSION, ConsumerGroup
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offset_expiry import expired_of_classic_group, expired_of_consumer_group
from onceflow.broker.group.offsets import CommittedOffset, TopicPartition
from onceflow.broker.group.state import GroupState
from onceflow.broker.group.subscriptions import subscribed_topics
from onceflow.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState
_EXPIRY_TIMER = "offset-expiry"


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


def valid_group_id(group_id: str | None, *, allow_empty: bool) -> bool:
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


def offset_record(group_id: str, tp: TopicPartition, value: CommittedOffset) -> Record:
    key = fmt.encode_offset_key(fmt.OffsetKey(group_id, tp[0], tp[1]))
    return key, fmt.encode_offset_value(
        fmt.OffsetValue(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp)
    )


def offset_tombstone(group_id: str, tp: TopicPartition) -> Record:
    return fmt.encode_offset_key(fmt.OffsetKey(group_id, tp[0], tp[1])), None


def group_tombstone(group_id: str) -> Record:
    return fmt.encode_group_key(fmt.GroupKey(group_id)), None


class OffsetOperations:
    """Offset operations of :class:`~onceflow.broker.group.shard.GroupShard` (a mixin: ``self`` is
    the shard)."""

    # -- offsets -------------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
        api_version: int,
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if not valid_group_id(group_id, allow_empty=True):
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
            group = self.groups.get(group_id)
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
                    offset_record(
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
        """One transactional batch of the producer: the offsets stay pending until its marker."""
        now = self._now()
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        for tp, entry in offsets.items():
            if not self._partition_exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            value = CommittedOffset(entry.offset, entry.leader_epoch, entry.metadata or "", now)
            records.append(offset_record(group_id, tp, value))
            results[tp] = E.NONE
        if records and self._writes is not None:
            self._writes.batch = StoredBatch(tuple(records), producer_id, producer_epoch, transactional=True)
        return results

    def check_txn_member(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self.consumer_groups.check_offset_commit(
                consumer_group, member_id, group_instance_id, generation_id, transactional=True
            )
        group = self.groups.get(group_id)
        if group is None:
            return unknown_group_commit_error(generation_id, transactional=True)
        return self._membership.check_txn_commit_member(group, member_id, group_instance_id, generation_id)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool,
        member_id: str | None,
        member_epoch: int,
    ) -> tuple[ErrorCode, list[tuple[TopicPartition, CommittedOffset | None, ErrorCode]]]:
        if not valid_group_id(group_id, allow_empty=True):
            return E.INVALID_GROUP_ID, []
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer_groups.check_offset_fetch(consumer_group, member_id, member_epoch)
            if error is not E.NONE:
                return error, []
        wanted = sorted(self.offsets.all_for(group_id)) if partitions is None else partitions
        out = []
        for tp in wanted:
            if require_stable and self.offsets.has_pending(group_id, tp):
                out.append((tp, None, E.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, self.offsets.get(group_id, tp), E.NONE))
        return E.NONE, out

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only for partitions no live member of the group subscribes to."""
        if not valid_group_id(group_id, allow_empty=False):
            return E.INVALID_GROUP_ID, {}
        consumer_group = self.consumer_groups.get(group_id)
        group = self.groups.get(group_id)
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
                if self.offsets.get(group_id, tp) is not None:
                    self._emit([offset_tombstone(group_id, tp)])
        return E.NONE, results

    def forget_deleted_partitions(self, partition: int, gone: set[TopicPartition]) -> int:
        """Tombstones for every offset, committed or pending, of the deleted topic partitions ``gone``
        in the groups of ``partition``; an Empty group left with none is deleted."""
        count = 0
        for group_id in sorted(self.offsets.group_ids()):
            if self.partition_for(group_id) != partition:
                continue
            doomed = (set(self.offsets.all_for(group_id)) | self.offsets.pending_partitions(group_id)) & gone
            if doomed:
                self._emit([offset_tombstone(group_id, tp) for tp in sorted(doomed)])
                count += len(doomed)
                log.info("group %s: %d offsets of deleted partitions removed", group_id, len(doomed))
            self._delete_if_unused(group_id, doomed)
        return count

    def _delete_if_unused(self, group_id: str, going: set[TopicPartition]) -> None:
        """Delete a group that will have neither offsets (once ``going`` are removed) nor members (an
        Empty classic group, a consumer group without members), as Kafka does once its offsets
        expire or their topic is deleted."""
        left = set(self.offsets.all_for(group_id)) | self.offsets.pending_partitions(group_id)
        if left - going:
            return
        group = self.groups.get(group_id)
        if group is not None and group.is_in(S.EMPTY):
            self._emit([group_tombstone(group_id)])
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None and not consumer_group.members:
            self.consumer_groups.delete(group_id)

    # -- offset expiry -------------------------------------------------------------------------------

    def expire(self, partition: int) -> int:
        now, retention = self._now(), self.config.offsets_retention_ms
        expired_total = 0
        groups: list[GroupMetadata | ConsumerGroup] = [
            *self.groups.values(),
            *self.consumer_groups.all(),
        ]
        for group in groups:
            group_id = group.group_id
            if self.partition_for(group_id) != partition:
                continue
            offsets = self.offsets.all_for(group_id)
            if isinstance(group, GroupMetadata):
                expired = expired_of_classic_group(group, offsets, now, retention)
                check_unused = group.is_in(S.EMPTY)
            else:
                expired = expired_of_consumer_group(group, offsets, now, retention)
                check_unused = True
            if expired:
                self._emit([offset_tombstone(group_id, tp) for tp in expired])
                expired_total += len(expired)
                log.info("group %s: %d offsets expired", group_id, len(expired))
            if check_unused:
                self._delete_if_unused(group_id, set(expired))
        return expired_total

    def schedule_expiry(self, partition: int) -> None:
        interval = self.config.offsets_retention_check_interval_ms

        def expire() -> int:
            self.runtime.schedule_timer(
                partition, interval, self.operation(expire), key=_EXPIRY_TIMER, retry=False
            )
            return self.expire(partition)

        self.runtime.schedule_timer(
            partition, interval, self.operation(expire), key=_EXPIRY_TIMER, retry=False
        )
