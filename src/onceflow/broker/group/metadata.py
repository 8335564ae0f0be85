"""A classic group's membership and generation (Kafka's ``GroupMetadata``), without timers or I/O.

The coordinator drives it; every state change goes through :meth:`GroupMetadata.transition`, which
consults the table in :mod:`onceflow.broker.group.state`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter

from onceflow.broker.coordinator.scheduler import TimerHandle
from onceflow.broker.group.log_format import GroupValue, MemberRecord
from onceflow.broker.group.member import Member
from onceflow.broker.group.state import GroupEvent, GroupState, next_state

log = logging.getLogger(__name__)


class GroupMetadata:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet used to rejoin.
        self.pending_members: dict[str, TimerHandle | None] = {}
        # KIP-345: group.instance.id -> the member id that currently owns it.
        self.static_members: dict[str, str] = {}
        # The join phase's timer (initial delay or rebalance timeout) and, for the initial delay,
        # whether someone joined during it and how much of the rebalance timeout is left.
        self.join_timer: TimerHandle | None = None
        self.initial_delay_active = False
        self.new_member_added = False
        self.initial_delay_remaining_ms = 0
        self.sync_timer: TimerHandle | None = None

    # -- state -----------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, event: GroupEvent, now_ms: int) -> GroupState:
        new = next_state(self.group_id, self.state, event)
        log.debug("group %s: %s --%s--> %s", self.group_id, self.state.name, event.name, new.name)
        self.state = new
        self.current_state_timestamp = now_ms
        return new

    # -- members ---------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            # Prefer a member that already rejoined: it will get the member list in its response.
            joined = [m for m in self.members.values() if m.awaiting_join]
            nxt = joined[0] if joined else next(iter(self.members.values()), None)
            self.leader_id = nxt.member_id if nxt else None
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member came back with a new member id: the old id is fenced from now on."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    # -- protocols -------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Can a member with these assignors join? (Kafka's ``supportsProtocols``.)"""
        if not protocol_type or not protocol_names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(protocol_names))

    def select_protocol(self) -> str:
        """Every member votes for its favourite common assignor; most votes wins.

        Ties go to the assignor the leader prefers (Kafka leaves ties to map order; we make them
        deterministic).
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: members share no protocol")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocol_names():
            if votes.get(name) == best:
                return name
        return max(votes, key=votes.__getitem__)

    # -- persistence -----------------------------------------------------------------------

    def to_record(
        self,
        *,
        assignments: dict[str, bytes] | None = None,
        replaced_member: tuple[str, str, dict[str, object]] | None = None,
    ) -> GroupValue:
        """The group's metadata record; ``assignments`` (member id -> bytes) in place of the members'
        current ones, ``replaced_member`` ``(old id, new id, changed fields)`` as if a static member
        had been replaced: the record of a change is built before the change is made."""
        members = []
        for m in self.members.values():
            member = MemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata_for(self.protocol_name) if self.protocol_name else b"",
                assignment=assignments.get(m.member_id, m.assignment) if assignments else m.assignment,
            )
            if replaced_member is not None and m.member_id == replaced_member[0]:
                member = dataclasses.replace(member, member_id=replaced_member[1], **replaced_member[2])
            members.append(member)
        leader = self.leader_id
        if replaced_member is not None and leader == replaced_member[0]:
            leader = replaced_member[1]
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=leader,
            current_state_timestamp=self.current_state_timestamp,
            members=tuple(members),
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupValue, now_ms: int) -> GroupMetadata:
        """Rebuild a group from its last metadata record: Stable if it had members, else Empty."""
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        ts = value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
        group = cls(group_id, ts, state)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for rec in value.members:
            member = Member(
                member_id=rec.member_id,
                group_instance_id=rec.group_instance_id,
                client_id=rec.client_id,
                client_host=rec.client_host,
                rebalance_timeout_ms=rec.rebalance_timeout_ms,
                session_timeout_ms=rec.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", rec.subscription)],
                assignment=rec.assignment,
                synced=True,
            )
            group.add_member(member)
        group.protocol_type = value.protocol_type or None
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        return group
