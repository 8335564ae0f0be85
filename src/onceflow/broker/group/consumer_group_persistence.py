"""How the groups of :class:`~onceflow.broker.group.consumer_groups.ConsumerGroups` (mixed into
it) reach ``__consumer_offsets`` and come back from it. A change is worked out on a copy of the group; its
records (:mod:`consumer_group_records`: group epoch, target epoch, and per member its subscription,
target and current assignment) are compared with those of the live group, and only the differences
(and tombstones for what went) are emitted. The live group changes only by :meth:`replay` of those
records once they are in the log, the same replay that loading a partition uses.
"""

from __future__ import annotations

from collections.abc import Callable

from onceflow.broker.group import consumer_group_records as rec
from onceflow.broker.group.consumer_group import ConsumerGroup, ConsumerMember


class ConsumerGroupPersistence:
    def _records(self, group: ConsumerGroup) -> dict[rec.ConsumerGroupKey, bytes]:
        """The group's whole state as records, by key."""
        gid = group.group_id
        records = {
            rec.ConsumerGroupKey(rec.GROUP_EPOCH, gid): rec.encode_epoch(group.epoch),
            rec.ConsumerGroupKey(rec.TARGET_EPOCH, gid): rec.encode_epoch(group.target_epoch),
        }
        for m in group.members.values():
            records[rec.ConsumerGroupKey(rec.MEMBER_METADATA, gid, m.member_id)] = rec.encode_member_metadata(
                member_metadata(m)
            )
            records[rec.ConsumerGroupKey(rec.CURRENT_ASSIGNMENT, gid, m.member_id)] = (
                rec.encode_current_assignment(m.assignment)
            )
        for member_id, target in group.target.items():
            records[rec.ConsumerGroupKey(rec.TARGET_MEMBER, gid, member_id)] = rec.encode_target_member(
                target
            )
        return records

    def _emit(
        self,
        group: ConsumerGroup | None,
        live: ConsumerGroup | None,
        written: Callable[[], None] | None,
        *,
        unchanged: bool = False,
    ) -> None:
        """Emit what turns ``live`` (None: no such group yet) into ``group`` (None: deleted): the
        records that differ and tombstones for those that went. ``unchanged``: nothing persisted
        changed, only ``written`` is due."""
        if group is None:  # delete(): ``live`` goes
            group_id, now, persisted = live.group_id if live else "", {}, live.persisted if live else {}
        elif unchanged:
            self._emit_records(group.group_id, [], written)
            return
        else:
            group_id = group.group_id
            persisted = live.persisted if live is not None else {}
            now = self._records(group)
        changes = [(k, v) for k, v in now.items() if persisted.get(k) != v]
        changes += [(k, None) for k in persisted if k not in now]
        self._emit_records(group_id, [(rec.encode_key(k), v) for k, v in changes], written)

    def _replay_now(
        self, group_id: str, records: list[tuple[bytes, bytes | None]], written: Callable[[], None] | None
    ) -> None:
        """The ``emit`` of a ConsumerGroups without a log: replay at once."""
        from onceflow.broker.group import log_format as fmt

        for raw_key, value in records:
            key = fmt.decode_key(raw_key)
            if isinstance(key, rec.ConsumerGroupKey):
                self.replay(key, value)
        if written is not None:
            written()

    def replay(self, key: rec.ConsumerGroupKey, value: bytes | None) -> None:
        """Fold one record of ``__consumer_offsets`` into the group it belongs to (loading and live
        writes alike; a tombstone removes what it names, the group epoch's the group)."""
        group_id = key.group_id
        group = self._groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self._groups[group_id] = ConsumerGroup(group_id)
        if value is None:
            group.persisted.pop(key, None)
        else:
            group.persisted[key] = value
        kind = key.record_type
        if kind == rec.GROUP_EPOCH:
            if value is None:
                self.forget(group_id)  # deleted: its member and target records go in the same batch
            else:
                group.epoch = rec.decode_epoch(value)
        elif kind == rec.TARGET_EPOCH:
            group.target_epoch = rec.decode_epoch(value) if value is not None else 0
        elif kind == rec.TARGET_MEMBER:
            if value is None:
                group.target.pop(key.member_id or "", None)
            else:
                group.target[key.member_id or ""] = rec.decode_target_member(value)
        elif kind in (rec.MEMBER_METADATA, rec.CURRENT_ASSIGNMENT):
            self._replay_member(group, key.member_id or "")

    def _replay_member(self, group: ConsumerGroup, member_id: str) -> None:
        """A member exists while both its subscription and its current assignment records do."""
        gid = group.group_id
        metadata = group.persisted.get(rec.ConsumerGroupKey(rec.MEMBER_METADATA, gid, member_id))
        current = group.persisted.get(rec.ConsumerGroupKey(rec.CURRENT_ASSIGNMENT, gid, member_id))
        member = group.members.get(member_id)
        if metadata is None or current is None:
            if member is not None:
                group.remove(member)
                member.cancel_timers()
            return
        md = rec.decode_member_metadata(metadata)
        if member is None:
            member = group.members[member_id] = ConsumerMember(
                member_id, md.instance_id, md.client_id, md.client_host
            )
        member.instance_id, member.client_id, member.client_host = (
            md.instance_id,
            md.client_id,
            md.client_host,
        )
        member.rack_id = md.rack_id
        member.rebalance_timeout_ms = md.rebalance_timeout_ms
        member.subscribed_topic_names = md.subscribed_topic_names
        member.subscribed_topic_regex = md.subscribed_topic_regex
        member.server_assignor = md.server_assignor
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member_id
        assignment = rec.decode_current_assignment(current)
        if assignment != member.assignment:
            group.set_assignment(member, assignment)


def member_metadata(m: ConsumerMember) -> rec.MemberMetadata:
    """What a member's subscription record (type 5) holds."""
    return rec.MemberMetadata(
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.rebalance_timeout_ms,
        m.server_assignor,
    )
