"""Membership of a consumer-protocol group (KIP-848) as a sans-IO state machine.

With ``group.protocol=consumer`` the coordinator assigns the partitions; a member only heartbeats
(ConsumerGroupHeartbeat) and moves towards the assignment each answer carries. The driver
(:mod:`.driver`) asks this object for heartbeats, feeds the answers back, and runs the
reconciliation it computes (revoke, then assign) inside the consumer's poll, where the user's
callbacks run. Every rule about epochs, what a heartbeat must carry and which errors mean "rejoin",
"find the coordinator again" or "give up" lives here, testable without a broker.

The rules, as Kafka's consumer applies them:

- A member joins with epoch 0 and its subscription, then uses the epoch each answer gives. From v1
  (KIP-1082) the member names itself with a random id; with v0 the coordinator names it.
- A heartbeat carries only what changed since the last one the coordinator answered (subscription,
  owned partitions); a *full* heartbeat (after joining, an error or a lost answer) carries everything,
  and the coordinator then answers with the whole assignment.
- The owned partitions a heartbeat reports are the acknowledgement of a reconciliation: the
  coordinator withholds partitions from a member until their previous owner has reported them gone,
  and bumps the member's epoch only once it owns nothing outside its new target.
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the membership is gone; the partitions are *lost* (not
  revoked: another member may read them already) and the member joins again with epoch 0.
- Leaving is a heartbeat with epoch -1; a static member (group.instance.id) leaves with -2, keeping
  its partitions reserved for its return.
"""

from __future__ import annotations

import base64
import enum
import uuid
from dataclasses import dataclass, field

from onceflow.client.consumer.actions import Action
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError
from onceflow.protocol.messages import ConsumerGroupHeartbeatRequest

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

_Owned = ConsumerGroupHeartbeatRequest.TopicPartitions

_COORDINATOR_ERRORS = COORDINATOR_MOVED | {ErrorCode.NETWORK_EXCEPTION}
_FENCED_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors that no retry can mend: a wrong config, a missing right, a group of the other protocol.
_FATAL_ERRORS = frozenset(
    {
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        ErrorCode.GROUP_ID_NOT_FOUND,  # a classic group with members holds this group id
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
    }
)


def new_member_id() -> str:
    """A random member id, as Kafka's clients make them (a UUID in URL-safe base64, 22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"  # the next heartbeat joins (epoch 0)
    JOINING = "JOINING"  # the joining heartbeat is in flight
    STABLE = "STABLE"  # in the group, with an epoch
    LEFT = "LEFT"  # left (closing, or max.poll.interval.ms passed); the next poll joins again


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    action: Action
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What to do to reach the coordinator's target: revoke first, then assign."""

    revoke: list[TopicPartition] = field(default_factory=list)
    assign: list[TopicPartition] = field(default_factory=list)


class ConsumerMembership:
    def __init__(
        self,
        group_id: str,
        *,
        group_instance_id: str | None = None,
        rebalance_timeout_ms: int = 300000,
        server_assignor: str | None = None,
        member_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self._own_member_id = member_id or new_member_id()
        self.member_id = self._own_member_id
        self.member_epoch = JOIN_EPOCH
        self.state = MemberState.UNJOINED
        self.heartbeat_interval_ms: int | None = None  # the coordinator's, once it answered
        self.owned: list[TopicPartition] = []
        self.lost = False  # fenced or left: owned partitions are to be reported lost
        self.fatal: KafkaError | None = None
        self.subscription_changed = False  # the next poll heartbeats at once with the new topics
        # The coordinator's target, by topic id (it may name topics we have no metadata for yet).
        self._target: frozenset[tuple[uuid.UUID, int]] | None = None
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        # What the last answered heartbeat carried (None: send it in full).
        self._sent_subscription: tuple[tuple[str, ...], str] | None = None
        self._sent_owned: frozenset[TopicPartition] | None = None
        self._in_flight: tuple[tuple[tuple[str, ...], str], frozenset[TopicPartition]] | None = None

    # -- identity, as commits and transactions present it --------------------------------------

    @property
    def generation_id(self) -> int:
        """The member epoch: what OffsetCommit v9 and TxnOffsetCommit carry for this member."""
        return self.member_epoch

    @property
    def active(self) -> bool:
        """In the group with an epoch: commits carry its identity."""
        return self.state is MemberState.STABLE and self.member_epoch > 0

    @property
    def joined(self) -> bool:
        return self.state is MemberState.STABLE

    # -- topic ids -------------------------------------------------------------------------------

    def learn_topic_ids(self, ids: dict[str, uuid.UUID]) -> None:
        self.topic_ids.update(ids)
        self._topic_names.update((i, name) for name, i in ids.items())

    def unknown_topic_ids(self) -> set[uuid.UUID]:
        """Topic ids in the target that metadata has not named yet (reconciliation waits for them)."""
        if self._target is None:
            return set()
        return {topic_id for topic_id, _p in self._target if topic_id not in self._topic_names}

    def request_rejoin(self) -> None:
        """The subscription changed: the next poll tells the coordinator (no rejoin is needed)."""
        self.subscription_changed = True

    # -- heartbeats ------------------------------------------------------------------------------

    def send_full_next(self) -> None:
        """The last answer may be lost: the next heartbeat carries everything."""
        self._sent_subscription = None
        self._sent_owned = None

    def heartbeat_request(
        self, topics: list[str], version: int, pattern: str | None = None
    ) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat (joining when UNJOINED/LEFT), with what changed since the last one.
        ``pattern`` subscribes by regular expression, matched by the coordinator (v1+)."""
        if pattern is not None and version < 1:
            raise KafkaError(
                f"group {self.group_id!r}: a pattern subscription needs ConsumerGroupHeartbeat v1, "
                f"the coordinator speaks v{version}",
                ErrorCode.UNSUPPORTED_VERSION,
            )
        if self.state in (MemberState.UNJOINED, MemberState.LEFT):
            self.member_epoch = JOIN_EPOCH
            self.member_id = self._own_member_id if version >= 1 else ""
            self.send_full_next()
            self.state = MemberState.JOINING
        # Names and regex travel together (librdkafka sends them so, and its mock insists): with names
        # only, an empty regex says "no regex"; with a pattern, the names are empty.
        subscription = (tuple(sorted(topics)) if pattern is None else (), pattern or "")
        owned = frozenset(self.owned)
        full = self._sent_subscription is None or self._sent_owned is None
        if owned and any(tp.topic not in self.topic_ids for tp in owned):
            raise KafkaError(
                f"group {self.group_id!r}: no topic id for an owned partition", ErrorCode.UNKNOWN_TOPIC_ID
            )
        self._in_flight = (subscription, owned)
        send_subscription = full or subscription != self._sent_subscription
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.group_instance_id,
            rack_id=None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=list(subscription[0]) if send_subscription else None,
            subscribed_topic_regex=subscription[1] if send_subscription and version >= 1 else None,
            server_assignor=self.server_assignor if full else None,
            topic_partitions=self._owned_field(owned) if full or owned != self._sent_owned else None,
        )

    def _owned_field(self, owned: frozenset[TopicPartition]) -> list:
        by_topic: dict[str, list[int]] = {}
        for tp in owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return [
            _Owned(topic_id=self.topic_ids[topic], partitions=sorted(parts))
            for topic, parts in sorted(by_topic.items())
        ]

    def on_heartbeat_response(self, response) -> HeartbeatOutcome:
        code = ErrorCode(response.error_code)
        sent, self._in_flight = self._in_flight, None
        if code == ErrorCode.NONE:
            if response.member_id:
                self.member_id = response.member_id  # v0: the coordinator's name for us
            self.member_epoch = response.member_epoch
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
            self.state = MemberState.STABLE
            if sent is not None:
                self._sent_subscription, self._sent_owned = sent
            if response.assignment is not None:
                self._target = frozenset(
                    (t.topic_id, p) for t in response.assignment.topic_partitions for p in t.partitions
                )
            return HeartbeatOutcome(Action.NONE)
        message = response.error_message
        self.send_full_next()
        if code in _FENCED_ERRORS:
            self.mark_lost()
            return HeartbeatOutcome(Action.LOST, code, message)
        if code in _COORDINATOR_ERRORS:
            self._retry_join()
            return HeartbeatOutcome(Action.REDISCOVER, code, message)
        if code in _FATAL_ERRORS or not code.retriable:
            self.fatal = KafkaError(
                f"group {self.group_id!r}: ConsumerGroupHeartbeat failed with {code.name}"
                + (f": {message}" if message else ""),
                code,
            )
            return HeartbeatOutcome(Action.FATAL, code, message)
        self._retry_join()
        return HeartbeatOutcome(Action.RETRY, code, message)

    def on_heartbeat_failed(self) -> None:
        """The heartbeat got no answer (connection lost, timeout): send the next one in full."""
        self._in_flight = None
        self.send_full_next()
        self._retry_join()

    def _retry_join(self) -> None:
        if self.state is MemberState.JOINING:
            self.state = MemberState.UNJOINED

    # -- reconciliation --------------------------------------------------------------------------

    def reconciliation(self) -> Reconciliation | None:
        """The steps from the owned partitions to the target, or None when there is nothing to do
        (or the target names a topic whose id metadata has not resolved yet)."""
        if self._target is None or self.state is not MemberState.STABLE or self.unknown_topic_ids():
            return None
        target = {TopicPartition(self._topic_names[i], p) for i, p in self._target}
        owned = set(self.owned)
        if target == owned:
            return None
        return Reconciliation(sorted(owned - target), sorted(target - owned))

    def revoked(self, partitions: list[TopicPartition]) -> None:
        gone = set(partitions)
        self.owned = [tp for tp in self.owned if tp not in gone]

    def assigned(self, partitions: list[TopicPartition]) -> None:
        self.owned = sorted(set(self.owned) | set(partitions))

    # -- losing and leaving ----------------------------------------------------------------------

    def mark_lost(self) -> None:
        """Fenced or removed: report ``owned`` lost at the next poll, then join again at epoch 0 (a v1
        member keeps its id, as Kafka's consumer does)."""
        self._out_of_group(MemberState.UNJOINED)

    def lose_partitions(self) -> list[TopicPartition]:
        lost, self.owned = self.owned, []
        self.lost = False
        return lost

    def leave_request(self) -> ConsumerGroupHeartbeatRequest | None:
        """The leaving heartbeat, or None if we are not in the group."""
        if self.state is not MemberState.STABLE:
            return None
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.group_instance_id,
            rack_id=None,
            rebalance_timeout_ms=-1,
            subscribed_topic_names=None,
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=None,
        )

    def left(self) -> None:
        """We sent our leave (or gave up on the group): partitions are lost; the next poll rejoins."""
        self._out_of_group(MemberState.LEFT)

    def _out_of_group(self, state: MemberState) -> None:
        self.lost = bool(self.owned)
        self._target = None
        self.member_epoch = JOIN_EPOCH
        self.state = state
        self.send_full_next()
