"""Groups of the consumer group protocol (KIP-848): ConsumerGroupHeartbeat's rules, and the checks
their members' offset commits and fetches go through (the groups themselves are
:mod:`consumer_group`). No sockets: the handler and the coordinator call in, timers run on the
injected :class:`Scheduler`, topics are read through :class:`TopicLookup`.

The coordinator, not the members, assigns partitions. Every change that can alter the assignment
(a member joins, leaves, or changes its subscription or assignor; a subscribed topic appears, goes or
grows) bumps the *group epoch*; the next heartbeat recomputes the *target assignment* at that epoch
with the group's assignor, and each member then reconciles towards its target one heartbeat at a time
(:mod:`reconciliation`), revoking before anyone else is given what it had.

Persistence (:mod:`consumer_group_persistence`, mixed in), as in Kafka's group coordinator: a
change is worked out on a copy of the group (:meth:`ConsumerGroup.working_copy`), its records
(:mod:`consumer_group_records`: group epoch, target epoch, and per member its subscription, target and
current assignment) are compared with those of the live group, and only the differences (and tombstones for what went) are emitted through the
injected ``emit``. The live group changes only by :meth:`ConsumerGroups.replay` of those records once
they are in ``__consumer_offsets``: the coordinator runtime appends them and replays them, with the
replay that loading a partition uses, so a heartbeat is answered only with a state the log holds and a
broker that loads the partition (a restart, a failover) gives members the epochs and partitions they
were told. What the records do not hold (session and revocation timers, the subscribed topics as of
the group epoch) is set on the live group once the records are written. Without an ``emit`` (tests of
the protocol alone) the records are replayed at once.
A heartbeat for a group this broker does not know is UNKNOWN_MEMBER_ID rather than Kafka's
GROUP_ID_NOT_FOUND, which clients treat as fatal (a group deleted under its members, for instance).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import Counter

from onceflow.broker.coordinator.scheduler import Scheduler
from onceflow.broker.group import assignment as a
from onceflow.broker.group.assignment import ASSIGNORS, DEFAULT_ASSIGNOR
from onceflow.broker.group.consumer_group import (
    FIRST_MEMBER_EPOCH_COMMIT_VERSION,
    LEAVE_EPOCH,
    NO_GENERATION,
    STATIC_LEAVE_EPOCH,
    CallLater,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    Emit,
    HeartbeatRequest,
    HeartbeatResult,
    TopicLookup,
)
from onceflow.broker.group.consumer_group_persistence import ConsumerGroupPersistence, member_metadata
from onceflow.broker.group.reconciliation import MemberAssignment, MemberState, next_assignment
from onceflow.broker.patterns import compile_pattern
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

E = ErrorCode


class ConsumerGroups(ConsumerGroupPersistence):
    def __init__(
        self,
        config: ConsumerGroupConfig,
        scheduler: Scheduler,
        topics: TopicLookup,
        *,
        emit: Emit | None = None,
        call_later: CallLater | None = None,
    ) -> None:
        self.config = config
        self._scheduler = scheduler
        self._topics = topics
        self._emit_records = emit or self._replay_now
        self._call_later = call_later or (
            lambda _group_id, delay, callback: scheduler.call_later(delay, callback)
        )
        self._groups: dict[str, ConsumerGroup] = {}

    # -- registry ------------------------------------------------------------------------------

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def all(self) -> list[ConsumerGroup]:
        return list(self._groups.values())

    def delete(self, group_id: str) -> None:
        """Emit the tombstones of every record of the group: its replay removes it."""
        group = self._groups[group_id]
        self._emit(None, group, None)

    def shutdown(self) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                member.cancel_timers()

    def forget(self, group_id: str) -> None:
        """Drop a group from memory, its log untouched (its partition was unloaded)."""
        group = self._groups.pop(group_id, None)
        if group is not None:
            for member in group.members.values():
                member.cancel_timers()

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """Raises :class:`KafkaError` with the answer's error code."""
        self._validate(req)
        live = self._groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(live, req)
        if live is None and req.member_epoch != 0:
            raise KafkaError(f"member {req.member_id} is not in group {req.group_id}", E.UNKNOWN_MEMBER_ID)
        if live is not None and req.member_epoch != 0:
            steady = self._steady_heartbeat(live, req)
            if steady is not None:
                return steady
        # Everything below works on a copy; the live group changes when the records are replayed.
        group = live.working_copy() if live is not None else ConsumerGroup(req.group_id)
        if req.member_epoch == 0:
            member, bump = self._join(group, req)
        else:
            member, bump = group.own(self._known_member(group, req).member_id), False
        metadata_before = member_metadata(member)
        bump |= self._update_subscription(member, req)
        bump |= self._refresh_topics(group)
        if bump:  # one new group epoch for whatever this heartbeat changed
            group.epoch += 1
        new_target = group.epoch > group.target_epoch
        if new_target:
            self._compute_target(group)
        before = member.assignment
        after = next_assignment(
            before,
            group.target_epoch,
            group.target.get(member.member_id, a.EMPTY),
            req.owned,
            lambda topic, partition: (
                group.owners.get((topic, partition), member.member_id) != member.member_id
            ),
        )
        if after != before:
            group.set_assignment(member, after)
        # Most heartbeats change nothing: only a change is worth rebuilding the group's records for.
        joined = req.member_epoch == 0
        changed_records = (
            joined or new_target or after != before or member_metadata(member) != metadata_before
        )
        member_id, topics, assignor = member.member_id, group.topics, group.assignor

        def written() -> None:
            self._after_write(req.group_id, member_id, before, topics, assignor)

        self._emit(group, live, written, unchanged=not changed_records)
        full_request = req.member_epoch == 0 or req.owned is not None
        changed = after.assigned != before.assigned or after.epoch != before.epoch
        return HeartbeatResult(
            member.member_id,
            after.epoch,
            self.config.heartbeat_interval_ms,
            after.assigned if (changed or full_request) else None,
        )

    def _steady_heartbeat(self, live: ConsumerGroup, req: HeartbeatRequest) -> HeartbeatResult | None:
        """Most heartbeats change nothing the log holds: the member's subscription is what it was,
        the topics and the target are current, and the member is where its reconciliation leaves
        it. Such a heartbeat is answered from the live group, read only, with no copy and no records
        (only the session is refreshed); any other gets None and takes the full path."""
        member = self._known_member(live, req)  # raises what the full path would
        if not _subscription_unchanged(member, req) or live.epoch > live.target_epoch:
            return None
        if self._topic_snapshot(live) != live.topics:
            return None
        before = member.assignment
        after = next_assignment(
            before,
            live.target_epoch,
            live.target.get(member.member_id, a.EMPTY),
            req.owned,
            lambda topic, partition: (
                live.owners.get((topic, partition), member.member_id) != member.member_id
            ),
        )
        if after != before:
            return None
        member_id, topics, assignor = member.member_id, live.topics, live.assignor
        self._emit_records(
            live.group_id, [], lambda: self._after_write(live.group_id, member_id, before, topics, assignor)
        )
        full_request = req.owned is not None
        return HeartbeatResult(
            member_id,
            before.epoch,
            self.config.heartbeat_interval_ms,
            before.assigned if full_request else None,
        )

    def _validate(self, req: HeartbeatRequest) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(message, E.INVALID_REQUEST)

        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {req.member_epoch} is not valid.")
        if not req.member_id and (req.api_version >= 1 or req.member_epoch != 0):
            raise invalid("MemberId can't be empty.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            raise invalid("InstanceId can't be null when MemberEpoch is -2.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise KafkaError(
                f"ServerAssignor {req.server_assignor} is not supported.", E.UNSUPPORTED_ASSIGNOR
            )
        if req.subscribed_topic_regex:
            compile_pattern(req.subscribed_topic_regex, "SubscribedTopicRegex")

    def _leave(self, group: ConsumerGroup | None, req: HeartbeatRequest) -> HeartbeatResult:
        member = group.members.get(req.member_id) if group is not None else None
        if req.instance_id is not None and group is not None and member is None:
            owner = group.static_members.get(req.instance_id)
            member = group.members.get(owner) if owner is not None else None
            if member is not None:
                raise KafkaError(
                    f"instance {req.instance_id} belongs to member {owner}", E.FENCED_INSTANCE_ID
                )
        if group is not None and member is not None:
            live, group = group, group.working_copy()
            member = group.own(member.member_id)
            written = None
            if req.member_epoch == STATIC_LEAVE_EPOCH:
                # A static member's temporary leave: it keeps its partitions, reserved for its instance id
                # until it rejoins or its session times out.
                group.set_assignment(
                    member,
                    dataclasses.replace(
                        member.assignment, epoch=STATIC_LEAVE_EPOCH, previous_epoch=member.assignment.epoch
                    ),
                )
                member_id, before, topics, assignor = (
                    member.member_id,
                    member.assignment,
                    group.topics,
                    group.assignor,
                )

                def written() -> None:
                    self._after_write(req.group_id, member_id, before, topics, assignor)
            else:
                group.remove(member)
                group.epoch += 1
                log.info("group %s: member %s left", group.group_id, member.member_id)
            self._emit(group, live, written)
        return HeartbeatResult(req.member_id, req.member_epoch, self.config.heartbeat_interval_ms, None)

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
        """The joining member, and whether the group's membership changed (a new group epoch)."""
        member_id = req.member_id or uuid.uuid4().hex  # v0: the coordinator names the member
        inherited: MemberAssignment | None = None
        predecessor: ConsumerMember | None = None
        if req.instance_id is not None:
            previous_id = group.static_members.get(req.instance_id)
            if previous_id is not None and previous_id != member_id:
                previous = group.members[previous_id]
                if previous.assignment.epoch != STATIC_LEAVE_EPOCH:
                    raise KafkaError(
                        f"instance {req.instance_id} is still used by member {previous_id}",
                        E.UNRELEASED_INSTANCE_ID,
                    )
                # The returning static member takes over its predecessor's partitions and epoch.
                inherited = dataclasses.replace(previous.assignment, epoch=previous.assignment.previous_epoch)
                predecessor = previous
                group.remove(previous)
                group.target[member_id] = group.target.pop(previous_id, a.EMPTY)
        old = group.members.get(member_id)
        if old is not None:  # rejoining under the same id: the old incarnation's partitions are free
            group.remove(old)
        if inherited is None and len(group.members) >= self.config.max_size:
            raise KafkaError(f"group {group.group_id} is full", E.GROUP_MAX_SIZE_REACHED)
        member = ConsumerMember(member_id, req.instance_id, req.client_id, req.client_host)
        if predecessor is not None:  # same subscription unless this heartbeat changes it
            for name in ("rack_id", "subscribed_topic_names", "subscribed_topic_regex", "server_assignor"):
                setattr(member, name, getattr(predecessor, name))
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static_members[req.instance_id] = member_id
        if inherited is not None:
            group.set_assignment(member, inherited)
            log.info("group %s: member %s took over instance %s", group.group_id, member_id, req.instance_id)
            return member, False
        log.info("group %s: member %s joined", group.group_id, member_id)
        return member, True

    def _known_member(self, group: ConsumerGroup, req: HeartbeatRequest) -> ConsumerMember:
        member = group.members.get(req.member_id)
        if member is None:
            raise KafkaError(f"member {req.member_id} is not in group {group.group_id}", E.UNKNOWN_MEMBER_ID)
        if req.instance_id is not None and group.static_members.get(req.instance_id) != member.member_id:
            raise KafkaError(f"instance {req.instance_id} belongs to another member", E.FENCED_INSTANCE_ID)
        current = member.assignment
        if req.member_epoch > current.epoch:
            raise KafkaError(
                f"member epoch {req.member_epoch} is ahead of {current.epoch}", E.FENCED_MEMBER_EPOCH
            )
        if req.member_epoch < current.epoch:
            # The answer that bumped the epoch may have been lost: the previous epoch is accepted from a
            # member that owns nothing beyond its current assignment.
            lost_answer = (
                req.member_epoch == current.previous_epoch
                and req.owned is not None
                and a.is_subset(req.owned, current.assigned)
            )
            if not lost_answer:
                raise KafkaError(
                    f"member epoch {req.member_epoch} is behind {current.epoch}", E.FENCED_MEMBER_EPOCH
                )
        return member

    def _update_subscription(self, member: ConsumerMember, req: HeartbeatRequest) -> bool:
        """Apply what the heartbeat changes; returns whether that alters the assignment."""
        changed = False
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None  # "" clears it
            changed |= regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if req.server_assignor is not None:
            changed |= req.server_assignor != member.server_assignor
            member.server_assignor = req.server_assignor
        return changed

    # -- assignment ------------------------------------------------------------------------------

    def _member_topics(self, member: ConsumerMember, all_names: list[str] | None) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex and all_names is not None:
            pattern = compile_pattern(member.subscribed_topic_regex, "SubscribedTopicRegex")
            names.update(n for n in all_names if pattern.fullmatch(n))
        return names

    def _refresh_topics(self, group: ConsumerGroup) -> bool:
        """Whether a subscribed topic appeared, went, or changed its partitions (a new group epoch)."""
        snapshot = self._topic_snapshot(group)
        if snapshot == group.topics:
            return False
        group.topics = snapshot
        return True

    def _topic_snapshot(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        uses_regex = any(m.subscribed_topic_regex for m in group.members.values())
        all_names = sorted(self._topics.topic_names()) if uses_regex else None
        wanted: set[str] = set()
        for member in group.members.values():
            wanted |= self._member_topics(member, all_names)
        snapshot = {}
        for name in sorted(wanted):
            found = self._topics.topic(name)
            if found is not None:
                snapshot[name] = found
        return snapshot

    def _compute_target(self, group: ConsumerGroup) -> None:
        all_names = sorted(group.topics)
        subscriptions = {
            m.member_id: frozenset(
                group.topics[n][0] for n in self._member_topics(m, all_names) if n in group.topics
            )
            for m in group.members.values()
        }
        counts = {topic_id: partitions for topic_id, partitions in group.topics.values()}
        chosen = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        name = chosen.most_common(1)[0][0] if chosen else DEFAULT_ASSIGNOR
        group.target = dict(ASSIGNORS[name](subscriptions, counts, group.target))
        group.assignor = name
        group.target_epoch = group.epoch
        log.debug("group %s: target assignment at epoch %d by %s", group.group_id, group.epoch, name)

    # -- timers ----------------------------------------------------------------------------------

    def _after_write(
        self,
        group_id: str,
        member_id: str,
        before: MemberAssignment,
        topics: dict[str, tuple[uuid.UUID, int]],
        assignor: str,
    ) -> None:
        """What a heartbeat changes besides its records, once they are written: the subscribed topics
        as of the group epoch, the assignor, and the member's timers."""
        group = self._groups.get(group_id)
        if group is None:
            return
        group.topics, group.assignor = topics, assignor
        member = group.members.get(member_id)
        if member is not None:
            self._refresh_session(group, member)
            self._watch_revocation(group, member, before)

    def _refresh_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        group_id, member_id = group.group_id, member.member_id
        member.session_timer = self._call_later(
            group_id,
            self.config.session_timeout_ms,
            lambda: self._fence(group_id, member_id, "its session timed out"),
        )

    def _watch_revocation(
        self, group: ConsumerGroup, member: ConsumerMember, before: MemberAssignment
    ) -> None:
        """A member asked to revoke has its rebalance timeout to do so, or it is fenced."""
        now_revoking = member.assignment.state is MemberState.UNREVOKED_PARTITIONS
        if now_revoking and before.state is not MemberState.UNREVOKED_PARTITIONS:
            group_id, member_id, epoch = group.group_id, member.member_id, member.assignment.epoch

            def expire() -> None:
                live_group = self._groups.get(group_id)
                current = live_group.members.get(member_id) if live_group is not None else None
                still_revoking = (
                    current is not None
                    and current.assignment.state is MemberState.UNREVOKED_PARTITIONS
                    and current.assignment.epoch == epoch
                )
                if still_revoking:
                    self._fence(group_id, member_id, "it did not revoke in time")

            if member.rebalance_timer is not None:
                member.rebalance_timer.cancel()
            member.rebalance_timer = self._call_later(group_id, member.rebalance_timeout_ms, expire)
        elif not now_revoking and member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None

    def _fence(self, group_id: str, member_id: str, why: str) -> None:
        live = self._groups.get(group_id)
        if live is None or member_id not in live.members:
            return
        group = live.working_copy()
        group.remove(group.members[member_id])
        group.epoch += 1
        log.info("group %s: member %s removed: %s", group_id, member_id, why)
        self._emit(group, live, None)

    def loaded(self, group_id: str) -> None:
        """The group's partition was replayed: members get a fresh session, revocations their
        deadline, and the subscribed topics are looked up again."""
        group = self._groups.get(group_id)
        if group is None:
            return
        group.topics = self._topic_snapshot(group)
        known_ids = {topic_id for topic_id, _ in group.topics.values()}
        held = {
            t
            for m in group.members.values()
            for t in (*m.assignment.assigned, *m.assignment.pending_revocation)
        }
        if held - known_ids or any(set(t) - known_ids for t in group.target.values()):
            group.topics = {}  # a topic went while we were down: the first heartbeat reassigns
        for member in group.members.values():
            self._refresh_session(group, member)
            self._watch_revocation(group, member, MemberAssignment(MemberState.STABLE, 0, 0, a.EMPTY))

    # -- offsets of consumer-protocol members ----------------------------------------------------

    def check_offset_commit(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        member_epoch: int,
        *,
        transactional: bool,
        api_version: int = FIRST_MEMBER_EPOCH_COMMIT_VERSION,
    ) -> ErrorCode:
        """Kafka's rule (``ConsumerGroup.validateOffsetCommit``), in its order:

        - a commit without an epoch (admin tools, consumers without group management) is accepted
          while the group is empty;
        - a TxnOffsetCommit that names no member at all (no member id, no instance id, generation -1:
          its producer gave no group metadata) is accepted;
        - otherwise the member must exist (UNKNOWN_MEMBER_ID);
        - an OffsetCommit (not a TxnOffsetCommit) from a member below ``api_version`` 9, which has no
          member epoch, is UNSUPPORTED_VERSION;
        - the epoch must be the member's: STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for
          TxnOffsetCommit, which has no such code.

        ``api_version`` is the OffsetCommit request's version; TxnOffsetCommit's is not checked."""
        if member_epoch < 0 and not group.members:
            return E.NONE
        if transactional and member_epoch == NO_GENERATION and not member_id and instance_id is None:
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if not transactional and api_version < FIRST_MEMBER_EPOCH_COMMIT_VERSION:
            return E.UNSUPPORTED_VERSION
        if member_epoch != member.assignment.epoch:
            return E.ILLEGAL_GENERATION if transactional else E.STALE_MEMBER_EPOCH
        return E.NONE

    def check_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's ``validateOffsetFetch``: a fetch naming no member (null id, epoch < 0) is accepted,
        which is every OffsetFetch below v9 (it has neither field: no version rule, unlike commits);
        a named member must exist and be at its epoch (STALE_MEMBER_EPOCH)."""
        if member_id is None and member_epoch < 0:
            return E.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.assignment.epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE


def _subscription_unchanged(member: ConsumerMember, req: HeartbeatRequest) -> bool:
    """Whether what the heartbeat sends of the member (rack, rebalance timeout, subscription,
    assignor) is what the member already has (fields not sent change nothing)."""
    return (
        (req.rack_id is None or req.rack_id == member.rack_id)
        and (req.rebalance_timeout_ms == -1 or req.rebalance_timeout_ms == member.rebalance_timeout_ms)
        and (
            req.subscribed_topic_names is None
            or tuple(sorted(set(req.subscribed_topic_names))) == member.subscribed_topic_names
        )
        and (
            req.subscribed_topic_regex is None
            or (req.subscribed_topic_regex or None) == member.subscribed_topic_regex
        )
        and (req.server_assignor is None or req.server_assignor == member.server_assignor)
    )
