"""Classic consumer-group membership as a sans-IO state machine (no sockets, no event loop).

The driver (:mod:`.driver`) asks this object for requests, sends them, and feeds the responses
back; each ``on_*_response`` returns an :class:`Action` telling the driver what to do next. Every rule
about member ids, generations and which errors mean "rejoin", "find the coordinator again" or "give
up" lives here, so it can be tested without a broker.

States say what happens next: UNJOINED (must send JoinGroup), JOINING (JoinGroup in flight),
SYNCING (SyncGroup in flight), STABLE (heartbeating with an assignment).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from onceflow.client.consumer.actions import Action
from onceflow.client.consumer.classic.assignors import (
    CONSUMER_PROTOCOL_TYPE,
    EAGER,
    Assignment,
    Assignor,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from onceflow.client.consumer.metadata_watch import MetadataWatch
from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"
    JOINING = "JOINING"
    SYNCING = "SYNCING"
    STABLE = "STABLE"


class IllegalMemberTransition(KafkaError):
    """The driver asked for a step the state machine does not allow from its current state."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR  # a client bug, not a wire error


# (state, event) -> next state; anything missing is a driver bug.
TRANSITIONS: dict[tuple[MemberState, str], MemberState] = {
    (MemberState.UNJOINED, "send_join"): MemberState.JOINING,
    (MemberState.STABLE, "send_join"): MemberState.JOINING,
    (MemberState.JOINING, "joined"): MemberState.SYNCING,
    (MemberState.JOINING, "join_failed"): MemberState.UNJOINED,
    (MemberState.SYNCING, "synced"): MemberState.STABLE,
    (MemberState.SYNCING, "sync_failed"): MemberState.UNJOINED,
    (MemberState.UNJOINED, "reset"): MemberState.UNJOINED,
    (MemberState.JOINING, "reset"): MemberState.UNJOINED,
    (MemberState.SYNCING, "reset"): MemberState.UNJOINED,
    (MemberState.STABLE, "reset"): MemberState.UNJOINED,
}

_COORDINATOR_ERRORS = COORDINATOR_MOVED
_FATAL_ERRORS = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What JoinGroup told us; ``members`` (member id -> subscription) is filled for the leader."""

    action: Action
    error: ErrorCode = ErrorCode.NONE
    is_leader: bool = False
    protocol: str | None = None
    members: dict[str, Subscription] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """The new assignment, split into what to revoke and what to add (cooperative), or all of it."""

    action: Action
    error: ErrorCode = ErrorCode.NONE
    assigned: list[TopicPartition] = field(default_factory=list)
    added: list[TopicPartition] = field(default_factory=list)
    revoked: list[TopicPartition] = field(default_factory=list)


class GroupMembership:
    def __init__(
        self,
        group_id: str,
        assignors: list[Assignor],
        *,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45000,
        rebalance_timeout_ms: int = 300000,
    ) -> None:
        self.group_id = group_id
        self.assignors = assignors
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.state = MemberState.UNJOINED
        self.member_id = UNKNOWN_MEMBER_ID
        self.generation_id = NO_GENERATION
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.owned: list[TopicPartition] = []
        self.rejoin_needed = True
        self.lost = False  # membership gone (fenced, expired, left): owned partitions are lost
        self._keep_member_id = False  # the lost generation's member id is still the coordinator's
        # (generation, member id) the last heartbeat went out as: its answer applies only to those
        self._heartbeat_sent_as: tuple[int, str] | None = None
        # The leader's partition counts at assignment vs the latest metadata (Kafka's MetadataSnapshot).
        self.metadata_watch = MetadataWatch()

    # -- helpers ---------------------------------------------------------------------------------

    def _move(self, event: str) -> None:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise IllegalMemberTransition(
                f"can't handle {event!r} in member state {self.state.name}"
            ) from None

    @property
    def active(self) -> bool:
        """In a generation with an assignment: commits carry the member's identity."""
        return self.state == MemberState.STABLE

    @property
    def protocol_is_eager(self) -> bool:
        """Eager unless every assignor we offer is cooperative (Kafka's rule for mixed lists)."""
        return any(a.rebalance_protocol == EAGER for a in self.assignors)

    def assignor(self, name: str) -> Assignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise KafkaError(
            f"the group chose assignor {name!r}, which this consumer did not offer",
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        )

    def reset_member(self) -> None:
        """Forget member id and generation (after UNKNOWN_MEMBER_ID, fencing or leaving); the id is
        kept when :meth:`mark_lost` was told so."""
        if not self._keep_member_id:
            self.member_id = UNKNOWN_MEMBER_ID
        self._keep_member_id = False
        self.generation_id = NO_GENERATION
        self.protocol = None
        self.leader_id = None
        self.rejoin_needed = True
        self.lost = False
        self._move("reset")

    def request_rejoin(self) -> None:
        """The subscription changed: the next poll joins again."""
        self.rejoin_needed = True

    def check_metadata(self) -> bool:
        """The metadata half of Kafka's ``rejoinNeededOrPending``: a stable member that made the last
        assignment (the leader) and whose snapshot of the topics' partition counts no longer matches
        the latest metadata asks for a rejoin, so the next assignment covers the change. Returns
        whether it asked now; a follower never does (see :mod:`.metadata_watch`)."""
        if self.state != MemberState.STABLE or self.rejoin_needed or not self.metadata_watch.changed():
            return False
        self.request_rejoin()
        return True

    def abandon_round(self) -> None:
        """A JoinGroup/SyncGroup got no answer (connection lost): start the round again, keeping
        the member id so the coordinator recognises us."""
        self.rejoin_needed = True
        self._move("reset")

    def mark_lost(self, *, keep_member_id: bool = False) -> None:
        """We left or were removed: the driver reports ``owned`` as lost at the next poll.
        ``keep_member_id`` (a commit answered ILLEGAL_GENERATION): only the generation is over, the
        coordinator still knows the member id, so the next JoinGroup presents it (Kafka's rule: a new
        id would leave the old one to hold up the rebalance until it times out)."""
        self.lost = True
        self._keep_member_id = keep_member_id
        self.rejoin_needed = True
        self._move("reset")

    def on_commit_refused(self, code: ErrorCode, generation_id: int, member_id: str) -> None:
        """An OffsetCommit sent as ``(generation_id, member_id)`` was refused because the membership
        moved on. As in Kafka's consumer, this changes nothing if the member has itself moved on since
        (a round ended, it was fenced meanwhile) or committed outside any generation; otherwise
        REBALANCE_IN_PROGRESS asks for a rejoin in the same generation, and any other answer
        (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND, FENCED_INSTANCE_ID) ends the
        generation: the partitions are lost at the next poll, which rejoins."""
        current = (self.generation_id, self.member_id)
        if generation_id < 0 or self.state != MemberState.STABLE or current != (generation_id, member_id):
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin()
        else:
            self.mark_lost(keep_member_id=code == ErrorCode.ILLEGAL_GENERATION)

    def _error_action(self, code: ErrorCode) -> Action:
        if code in _COORDINATOR_ERRORS:
            return Action.REDISCOVER
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            return Action.LOST
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return Action.REJOIN
        if code in _FATAL_ERRORS:
            return Action.FATAL
        if code.retriable:
            return Action.RETRY
        return Action.FATAL

    # -- JoinGroup -------------------------------------------------------------------------------

    def join_request(self, topics: list[str], owned: list[TopicPartition] | None = None) -> JoinGroupRequest:
        owned = self.owned if owned is None else owned
        protocols = []
        for a in self.assignors:
            # Cooperative members report what they own so the leader keeps it sticky (KIP-429);
            # eager members revoke everything before joining and report nothing.
            sub = Subscription(
                list(topics), [] if self.protocol_is_eager else list(owned), None, self.generation_id
            )
            protocols.append(
                JoinGroupRequest.JoinGroupRequestProtocol(name=a.name, metadata=encode_subscription(sub))
            )
        self._move("send_join")
        return JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=protocols,
            reason=None,
        )

    def on_join_response(self, response) -> JoinResult:
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NONE:
            self.member_id = response.member_id
            self.generation_id = response.generation_id
            self.protocol = response.protocol_name
            self.leader_id = response.leader
            self._move("joined")
            is_leader = self.member_id == self.leader_id
            members = {}
            if is_leader:
                members = {m.member_id: decode_subscription(m.metadata) for m in response.members}
            return JoinResult(Action.NONE, code, is_leader, self.protocol, members)
        self._move("join_failed")
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: the broker hands out our member id and wants it back in a second JoinGroup.
            self.member_id = response.member_id
            return JoinResult(Action.REJOIN, code)
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.member_id = UNKNOWN_MEMBER_ID
            self.generation_id = NO_GENERATION
            return JoinResult(Action.REJOIN, code)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return JoinResult(Action.RETRY, code)
        return JoinResult(self._error_action(code), code)

    # -- SyncGroup -------------------------------------------------------------------------------

    def compute_assignments(
        self, members: dict[str, Subscription], partitions_per_topic: dict[str, int]
    ) -> dict[str, bytes]:
        """The leader's job: run the chosen assignor over every member's subscription (a topic counted
        with no partitions, missing or deleted, gets nothing)."""
        if self.protocol is None:
            raise IllegalMemberTransition(
                "no protocol chosen: compute assignments after a successful JoinGroup"
            )
        counts = {t: n for t, n in partitions_per_topic.items() if n > 0}
        result = self.assignor(self.protocol).assign(counts, members)
        return {m: encode_assignment(Assignment(result.get(m, []))) for m in members}

    def sync_request(self, assignments: dict[str, bytes] | None = None) -> SyncGroupRequest:
        return SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self.protocol,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )

    def on_sync_response(self, response) -> SyncResult:
        code = ErrorCode(response.error_code)
        if code != ErrorCode.NONE:
            self._move("sync_failed")
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                return SyncResult(Action.REJOIN, code)
            return SyncResult(self._error_action(code), code)
        assigned = decode_assignment(response.assignment).partitions
        self._move("synced")
        self.rejoin_needed = False
        self.metadata_watch.joined(is_leader=self.member_id == self.leader_id)
        previous = set(self.owned)
        current = set(assigned)
        if self.protocol_is_eager:
            # Eager: everything was revoked before JoinGroup; the whole assignment is new.
            added, revoked = list(assigned), []
        else:
            added = sorted(current - previous)
            revoked = sorted(previous - current)
            if revoked:
                # Cooperative: give these up, then rejoin so the leader can hand them on.
                self.rejoin_needed = True
        self.owned = list(assigned)
        return SyncResult(Action.NONE, code, list(assigned), added, revoked)

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------------

    def heartbeat_request(self) -> HeartbeatRequest:
        self._heartbeat_sent_as = (self.generation_id, self.member_id)
        return HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )

    def on_heartbeat_response(self, response) -> Action:
        """What a heartbeat's answer asks for. An answer about a generation the member has left since
        the heartbeat went out (a rejoin started, it left) is ignored, as in Kafka's consumer: the
        JoinGroup in flight will tell."""
        code = ErrorCode(response.error_code)
        sent_as, self._heartbeat_sent_as = self._heartbeat_sent_as, None
        if code == ErrorCode.NONE or self.state != MemberState.STABLE:
            return Action.NONE
        if sent_as is not None and sent_as != (self.generation_id, self.member_id):
            return Action.NONE
        action = self._error_action(code)
        if action == Action.REJOIN:
            self.rejoin_needed = True
        elif action == Action.LOST:
            self.mark_lost()
        return action

    def leave_request(self) -> LeaveGroupRequest:
        return LeaveGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            members=[
                LeaveGroupRequest.MemberIdentity(
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                    reason="consumer leaving",
                )
            ],
        )

    def lose_partitions(self) -> list[TopicPartition]:
        """Our membership is gone: the owned partitions may already belong to someone else."""
        lost, self.owned = self.owned, []
        return lost

    def revoke_all(self) -> list[TopicPartition]:
        """Eager protocol: give up every partition before joining."""
        revoked, self.owned = self.owned, []
        return revoked
