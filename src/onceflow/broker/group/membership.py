"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup for one group: Kafka's classic rebalance protocol
(JoinGroup and the join phase in :mod:`join_phase`, mixed in).

Sans-IO: responses that must wait (a JoinGroup until the join phase ends, a SyncGroup until the
leader's assignment) are callbacks stored on the member and called when the phase completes; timers
are operations of the coordinator runtime, asked for through the injected ``call_later``. Every wait
is bounded: the join phase by the initial delay or the rebalance timeout, the sync phase by the
rebalance timeout, members by their session timeout, so no client can wedge a group for longer than
its timeouts.

What is written to ``__consumer_offsets`` (through the injected ``store_group``, which the runtime
appends at the end of the operation) is what members are told, before they are told it, as Kafka's
group coordinator does: the leader's assignment is stored before the group becomes Stable and the
members get their share, and a static member's new member id before it is answered. If the write
fails nothing of it is applied: the waiting members get the (retriable) error and the group
rebalances. Membership between those records (who joined, who is waiting) lives in memory only; after
a restart the last stored generation comes back and its members carry on or rejoin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from onceflow.broker.coordinator.scheduler import Scheduler
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.join_phase import JoinPhase
from onceflow.broker.group.member import Member
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.requests import (
    CallLater,
    JoinResult,
    StoreGroup,
    SyncCallback,
    SyncResult,
)
from onceflow.broker.group.state import GroupEvent, GroupState
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState


class Membership(JoinPhase):
    """The rebalance protocol over :class:`GroupMetadata` objects that the coordinator owns."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        scheduler: Scheduler,
        store_group: StoreGroup,
        call_later: CallLater,
        rebuild: Callable[[GroupMetadata], None],
    ) -> None:
        self._config = config
        self._scheduler = scheduler  # the clock only: timers go through call_later
        self._store_group = store_group
        self._call_later = call_later
        self._rebuild = rebuild  # reload the group's partition from the log

    def _now(self) -> int:
        return self._scheduler.now_ms()

    # -- SyncGroup ---------------------------------------------------------------------------

    def sync(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        respond: SyncCallback,
    ) -> None:
        if group.is_in(S.DEAD):
            respond(SyncResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        error = self._check_member(group, member_id, group_instance_id)
        if error is E.NONE and generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        if error is E.NONE and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not E.NONE:
            respond(SyncResult(error))
            return
        member = group.members[member_id]
        if group.is_in(S.EMPTY):
            respond(SyncResult(E.UNKNOWN_MEMBER_ID))
        elif group.is_in(S.PREPARING_REBALANCE):
            respond(SyncResult(E.REBALANCE_IN_PROGRESS))
        elif group.is_in(S.STABLE):
            member.synced = True
            self._schedule_heartbeat(group, member)
            respond(self._sync_result(group, member))
        else:  # COMPLETING_REBALANCE
            member.synced = True
            member.sync_callback = respond
            self._schedule_heartbeat(group, member)
            if member_id == group.leader_id:
                self._apply_leader_assignment(group, assignments)

    def _apply_leader_assignment(self, group: GroupMetadata, assignments: dict[str, bytes]) -> None:
        # A member the leader forgot gets an empty assignment, as in Kafka.
        chosen = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}

        def stored() -> None:
            for mid, m in group.members.items():
                m.assignment = chosen[mid]
            group.transition(GroupEvent.ASSIGNMENT_RECEIVED, self._now())
            log.info("group %s: generation %d is stable", group.group_id, group.generation_id)
            for m in group.members.values():
                if m.sync_callback is not None:
                    callback, m.sync_callback = m.sync_callback, None
                    callback(self._sync_result(group, m))

        def not_stored(error: KafkaError) -> None:
            log.warning("group %s: storing the assignment failed: %s", group.group_id, error)
            self._reset_and_propagate_sync_error(group, error.code)
            self.prepare_rebalance(group, "storing the assignment failed")

        self._store_group(group, group.to_record(assignments=chosen), stored, not_stored)

    def _sync_result(self, group: GroupMetadata, member: Member) -> SyncResult:
        return SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)

    def _reset_and_propagate_sync_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
            if m.sync_callback is not None:
                callback, m.sync_callback = m.sync_callback, None
                callback(SyncResult(error))

    def _on_sync_timeout(self, group: GroupMetadata, generation: int) -> None:
        """Members that got a JoinGroup response but never sent SyncGroup within the rebalance timeout."""
        group.sync_timer = None
        if group.generation_id != generation or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return
        laggards = [m for m in group.members.values() if not m.synced]
        if not laggards:
            return
        for m in laggards:
            log.info("group %s: member %s did not sync in time", group.group_id, m.member_id)
            self._drop_member(group, m)
        self._after_member_removed(group, "members did not sync in time")

    # -- Heartbeat ---------------------------------------------------------------------------

    def heartbeat(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        error = self._check_member(group, member_id, group_instance_id)
        if error is not E.NONE:
            return error
        if group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_in(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def touch(self, group: GroupMetadata, member_id: str) -> None:
        """An offset commit from a member counts as a heartbeat (as in Kafka)."""
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_heartbeat(group, member)

    def _schedule_heartbeat(self, group: GroupMetadata, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_deadline_ms = self._now() + member.session_timeout_ms
        member.heartbeat_timer = self._call_later(
            group, member.session_timeout_ms, lambda: self._on_session_timeout(group, member)
        )

    def schedule_loaded_member(self, group: GroupMetadata, member: Member) -> None:
        """After a restart, members of a loaded group must heartbeat within their session timeout."""
        self._schedule_heartbeat(group, member)

    def _on_session_timeout(self, group: GroupMetadata, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or member.awaiting_sync:
            # Parked in a JoinGroup/SyncGroup: that phase's own timer bounds the wait.
            self._schedule_heartbeat(group, member)
            return
        log.info("group %s: member %s session timed out", group.group_id, member.member_id)
        self._drop_member(group, member)
        self._after_member_removed(group, f"member {member.member_id} session timed out")

    def _expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        if group.pending_members.pop(member_id, "absent") != "absent":
            log.info("group %s: pending member %s never rejoined", group.group_id, member_id)
            self._try_complete_join(group)

    # -- LeaveGroup --------------------------------------------------------------------------

    def leave(self, group: GroupMetadata, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """Remove each (member id, group instance id); one error code per entry, in order."""
        results = []
        for member_id, instance_id in leaving:
            results.append(self._leave_one(group, member_id, instance_id))
        return results

    def _leave_one(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != registered:
                return E.FENCED_INSTANCE_ID
            member_id = registered
        elif member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            self._try_complete_join(group)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s left", group.group_id, member_id)
        self._drop_member(group, member)
        self._after_member_removed(group, f"member {member_id} left")
        return E.NONE

    # -- shared --------------------------------------------------------------------------------

    def _check_member(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's static-membership fencing, then plain membership."""
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is None:
                return E.UNKNOWN_MEMBER_ID
            if registered != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def check_commit_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """May this member commit offsets for this generation? (OffsetCommit's membership rules.)"""
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is not None and registered != member_id:
                return E.FENCED_INSTANCE_ID
        if generation_id < 0 and group.is_in(S.EMPTY):
            return E.NONE  # a consumer that assigns partitions itself, using the group for offsets only
        if group.is_in(S.COMPLETING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def check_txn_commit_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """May this producer commit offsets for the group inside its transaction? (TxnOffsetCommit,
        KIP-447.) Unlike OffsetCommit there is no REBALANCE_IN_PROGRESS: a member that already holds
        the new generation may commit while the group completes the rebalance, because the generation
        check alone fences zombies. Requests without member data (TxnOffsetCommit v0-2, or a producer
        given only the group id) are accepted whatever the group's state."""
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(S.EMPTY):
            return E.NONE
        if generation_id < 0 and not member_id and instance_id is None:
            return E.NONE
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is not None and registered != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def _drop_member(self, group: GroupMetadata, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        if member.join_callback is not None:
            callback, member.join_callback = member.join_callback, None
            callback(JoinResult(E.UNKNOWN_MEMBER_ID, member.member_id))
        if member.sync_callback is not None:
            callback, member.sync_callback = member.sync_callback, None
            callback(SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove_member(member.member_id)

    def _after_member_removed(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)
        elif group.is_in(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def unload_group(self, group: GroupMetadata) -> None:
        """The group's partition was unloaded: stop its timers and send its waiting members to look
        for the new coordinator; the group object is dropped as it is."""
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if timer is not None:
                timer.cancel()
        for member in group.members.values():
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
            if member.join_callback is not None:
                callback, member.join_callback = member.join_callback, None
                callback(JoinResult(E.NOT_COORDINATOR, member.member_id))
            if member.sync_callback is not None:
                callback, member.sync_callback = member.sync_callback, None
                callback(SyncResult(E.NOT_COORDINATOR))

    def shutdown_group(self, group: GroupMetadata) -> None:
        """Cancel every timer of a group that is being deleted or unloaded."""
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None
        group.pending_members.clear()
        for member in list(group.members.values()):
            self._drop_member(group, member)
