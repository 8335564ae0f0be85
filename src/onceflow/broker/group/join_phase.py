"""JoinGroup and the join phase of a classic rebalance, for
:class:`~onceflow.broker.group.membership.Membership` (mixed into it). A new member gets its id (or,
when it asks to learn it first (KIP-394), MEMBER_ID_REQUIRED and must come back with it); a known or
static member rejoins. The phase ends when every member has joined, or the rebalance timeout (the
initial delay for a new group) has passed: the generation moves on, its protocol and leader are
picked and every waiting member is answered (the leader with the members' metadata), or a generation
left empty is stored. Kept apart from SyncGroup, Heartbeat and LeaveGroup: it is the protocol's
largest step, and the one every rebalance starts with.
"""

from __future__ import annotations

import logging
import uuid

from onceflow.broker.group.member import Member
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.requests import (
    JoinCallback,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from onceflow.broker.group.state import GroupEvent, GroupState
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState


class JoinPhase:
    def join(self, group: GroupMetadata, req: JoinRequest, respond: JoinCallback) -> None:
        if group.is_in(S.DEAD):
            # Deleted while this request was on its way: the client looks up the coordinator again.
            respond(JoinResult(E.COORDINATOR_NOT_AVAILABLE, req.member_id))
            return
        if not group.supports(req.protocol_type, [n for n, _ in req.protocols]):
            respond(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
            return
        if req.member_id == "":
            self._join_unknown_member(group, req, respond)
        else:
            self._join_known_member(group, req, respond)

    def _join_unknown_member(self, group: GroupMetadata, req: JoinRequest, respond: JoinCallback) -> None:
        new_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                self._rejoin_static_member(group, req, old_id, new_id, respond)
                return
            if self._group_full(group):
                respond(JoinResult(E.GROUP_MAX_SIZE_REACHED, ""))
                return
            self._add_member_and_rebalance(group, req, new_id, respond)
            return
        if self._group_full(group):
            respond(JoinResult(E.GROUP_MAX_SIZE_REACHED, ""))
            return
        if req.require_known_member_id:
            # KIP-394: remember the id; the member must come back with it within its session timeout.
            timer = self._call_later(
                group, req.session_timeout_ms, lambda: self._expire_pending_member(group, new_id)
            )
            group.pending_members[new_id] = timer
            respond(JoinResult(E.MEMBER_ID_REQUIRED, new_id))
            return
        self._add_member_and_rebalance(group, req, new_id, respond)

    def _join_known_member(self, group: GroupMetadata, req: JoinRequest, respond: JoinCallback) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            self._add_member_and_rebalance(group, req, member_id, respond)
            return
        error = self._check_member(group, member_id, req.group_instance_id)
        if error is not E.NONE:
            respond(JoinResult(error, member_id))
            return
        if group.is_in(S.EMPTY):
            respond(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
            return
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member lost our JoinGroup response: send it again.
                respond(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        else:  # STABLE
            if member_id == group.leader_id or not member.matches(req.protocols):
                # The leader rejoins to make us rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(self._join_result(group, member, with_members=False))

    def _rejoin_static_member(
        self, group: GroupMetadata, req: JoinRequest, old_id: str, new_id: str, respond: JoinCallback
    ) -> None:
        old = group.members[old_id]
        # The old incarnation is fenced: answer anything it still waits for.
        if old.join_callback is not None:
            old.join_callback(JoinResult(E.FENCED_INSTANCE_ID, old_id))
            old.join_callback = None
        if old.sync_callback is not None:
            old.sync_callback(SyncResult(E.FENCED_INSTANCE_ID))
            old.sync_callback = None
        instance_id = req.group_instance_id or ""
        if group.is_in(S.STABLE) and old.matches(req.protocols) and old_id != group.leader_id:
            # KIP-345: a static member that restarts with the same subscription gets its old
            # assignment back without a rebalance. The new member id must survive a restart: it is
            # stored first, and the member is replaced only once it is.
            changes = {
                "client_id": req.client_id,
                "client_host": req.client_host,
                "session_timeout_ms": req.session_timeout_ms,
                "rebalance_timeout_ms": req.rebalance_timeout_ms,
            }

            def replaced() -> None:
                member = group.replace_static_member(instance_id, old_id, new_id)
                for name, value in changes.items():
                    setattr(member, name, value)
                log.info("group %s: static member %s rejoined as %s", group.group_id, instance_id, new_id)
                self._schedule_heartbeat(group, member)
                respond(self._join_result(group, member, with_members=False))

            def not_stored(error: KafkaError) -> None:
                log.warning(
                    "group %s: storing static member %s failed: %s", group.group_id, instance_id, error
                )
                respond(JoinResult(error.code, ""))

            record = group.to_record(replaced_member=(old_id, new_id, changes))
            self._store_group(group, record, replaced, not_stored)
            return
        member = group.replace_static_member(instance_id, old_id, new_id)
        log.info("group %s: static member %s rejoined as %s", group.group_id, instance_id, new_id)
        self._update_member_and_rebalance(group, member, req, respond)

    def _group_full(self, group: GroupMetadata) -> bool:
        return len(group.members) + len(group.pending_members) >= self._config.group_max_size

    def _add_member_and_rebalance(
        self, group: GroupMetadata, req: JoinRequest, member_id: str, respond: JoinCallback
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            join_callback=respond,
            is_new=True,
        )
        group.add_member(member)
        if group.initial_delay_active:
            group.new_member_added = True
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")
        self._try_complete_join(group)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: Member, req: JoinRequest, respond: JoinCallback
    ) -> None:
        if member.join_callback is not None and member.join_callback is not respond:
            # A second JoinGroup replaces the first, whose connection is most likely gone.
            member.join_callback(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.join_callback = respond
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._try_complete_join(group)

    # -- the join phase ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            # Assignments of the abandoned generation must not be handed out.
            self._reset_and_propagate_sync_error(group, E.REBALANCE_IN_PROGRESS)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        was_empty = group.is_in(S.EMPTY)
        group.transition(GroupEvent.PREPARE_REBALANCE, self._now())
        log.info(
            "group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation_id, reason
        )
        rebalance_timeout = self._rebalance_timeout(group)
        delay = min(self._config.group_initial_rebalance_delay_ms, rebalance_timeout)
        if group.join_timer is not None:
            group.join_timer.cancel()
        if was_empty and delay > 0:
            # group.initial.rebalance.delay.ms: give the other members of a starting application a
            # chance to arrive before the first generation, extended per arrival up to the timeout.
            group.initial_delay_active = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
            group.join_timer = self._call_later(group, delay, lambda: self._on_initial_delay(group))
        else:
            group.initial_delay_active = False
            group.join_timer = self._call_later(
                group, rebalance_timeout, lambda: self._on_join_timeout(group)
            )
            # Everybody may already be in (e.g. the last member left): no reason to wait.
            self._try_complete_join(group)

    def _rebalance_timeout(self, group: GroupMetadata) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _on_initial_delay(self, group: GroupMetadata) -> None:
        if not group.is_in(S.PREPARING_REBALANCE) or not group.initial_delay_active:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay = min(self._config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms -= delay
            group.new_member_added = False
            group.join_timer = self._call_later(group, delay, lambda: self._on_initial_delay(group))
            return
        self._complete_join(group)

    def _on_join_timeout(self, group: GroupMetadata) -> None:
        if group.is_in(S.PREPARING_REBALANCE):
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if (
            group.is_in(S.PREPARING_REBALANCE)
            and not group.initial_delay_active
            and group.all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_active = False
        # Dynamic members that did not rejoin in time are out; static ones keep their place
        # until their session times out (KIP-345).
        for member in [m for m in group.members.values() if not m.awaiting_join and not m.is_static]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            self._drop_member(group, member)
        group.generation_id += 1
        now = self._now()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupEvent.ALL_MEMBERS_LEFT, now)
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            # The members already left in memory: if this write fails, memory is ahead of the log, so
            # the partition is rebuilt from the log (the previous generation comes back and its
            # members, told NOT_COORDINATOR, leave again). Kafka only logs it; a restart or a failover
            # would bring back that generation all the same.
            self._store_group(
                group, group.to_record(), None, lambda error: self._empty_not_stored(group, error)
            )
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members or not group.members[group.leader_id].awaiting_join:
            joined = [m.member_id for m in group.members.values() if m.awaiting_join]
            group.leader_id = joined[0] if joined else next(iter(group.members))
        group.transition(GroupEvent.JOIN_COMPLETED, now)
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            member.synced = False
            member.assignment = b""
            if member.join_callback is not None:
                callback, member.join_callback = member.join_callback, None
                member.is_new = False
                callback(self._join_result(group, member))
                self._schedule_heartbeat(group, member)
        generation = group.generation_id
        group.sync_timer = self._call_later(
            group, self._rebalance_timeout(group), lambda: self._on_sync_timeout(group, generation)
        )

    def _empty_not_stored(self, group: GroupMetadata, error: KafkaError) -> None:
        log.warning(
            "group %s: storing empty generation %d failed: %s", group.group_id, group.generation_id, error
        )
        self._rebuild(group)

    def _join_result(self, group: GroupMetadata, member: Member, *, with_members: bool = True) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members and member.member_id == group.leader_id and group.protocol_name is not None:
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            error=E.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=members,
        )
