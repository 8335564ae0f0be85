"""Partition assignors (range, round-robin, cooperative-sticky) and the consumer protocol's
subscription/assignment bytes, as Kafka's consumers exchange them through JoinGroup and SyncGroup.

Assignors are pure: the group leader hands them every member's :class:`Subscription` and the partition
count of each subscribed topic, and gets back the partitions of each member. Members are ordered by
member id, so every leader computes the same result.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import ErrorCode, KafkaError

CONSUMER_PROTOCOL_TYPE = "consumer"
EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"
_SUBSCRIPTION_VERSION = 2  # v1 adds owned partitions (KIP-429), v2 their generation, v3 rack
_ASSIGNMENT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: list[str]
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    user_data: bytes | None = None
    generation_id: int = -1


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: list[TopicPartition]
    user_data: bytes | None = None


def _group_by_topic(partitions: list[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def encode_subscription(sub: Subscription) -> bytes:
    s = ConsumerProtocolSubscription
    msg = s(
        topics=sorted(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[
            s.TopicPartition(topic=t, partitions=ps)
            for t, ps in _group_by_topic(sub.owned_partitions).items()
        ],
        generation_id=sub.generation_id,
        rack_id=None,
    )
    return bytes(msg.encode(version=_SUBSCRIPTION_VERSION))


def decode_subscription(data: bytes) -> Subscription:
    try:
        msg = ConsumerProtocolSubscription.decode(bytes(data))
    except Exception as exc:  # kafka.protocol reports truncation as struct/index errors
        raise KafkaError(f"unreadable consumer subscription: {exc!r}", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    owned = [
        TopicPartition(tp.topic, p)
        for tp in (getattr(msg, "owned_partitions", None) or [])
        for p in tp.partitions
    ]
    generation = getattr(msg, "generation_id", -1)
    return Subscription(list(msg.topics), owned, msg.user_data, -1 if generation is None else generation)


def encode_assignment(assignment: Assignment) -> bytes:
    a = ConsumerProtocolAssignment
    msg = a(
        assigned_partitions=[
            a.TopicPartition(topic=t, partitions=ps)
            for t, ps in _group_by_topic(assignment.partitions).items()
        ],
        user_data=assignment.user_data,
    )
    return bytes(msg.encode(version=_ASSIGNMENT_VERSION))


def decode_assignment(data: bytes | None) -> Assignment:
    if not data:  # an empty assignment is sent as zero bytes by some brokers/leaders
        return Assignment([])
    try:
        msg = ConsumerProtocolAssignment.decode(bytes(data))
    except Exception as exc:
        raise KafkaError(f"unreadable consumer assignment: {exc!r}", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    return Assignment(
        [TopicPartition(tp.topic, p) for tp in msg.assigned_partitions for p in tp.partitions], msg.user_data
    )


class Assignor(Protocol):
    name: str
    rebalance_protocol: str

    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, list[TopicPartition]]: ...


class RangeAssignor:
    """Per topic, consecutive ranges of partitions; the first ``n % m`` members get one more."""

    name = "range"
    rebalance_protocol = EAGER

    def assign(self, partitions_per_topic, subscriptions):
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic, count in sorted(partitions_per_topic.items()):
            members = sorted(m for m, s in subscriptions.items() if topic in s.topics)
            if not members:
                continue
            per_member, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                n = per_member + (1 if i < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + n))
                start += n
        return result


class RoundRobinAssignor:
    """All partitions in (topic, partition) order dealt to members in turn, skipping members that
    do not subscribe to the partition's topic."""

    name = "roundrobin"
    rebalance_protocol = EAGER

    def assign(self, partitions_per_topic, subscriptions):
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return result
        turn = 0
        for topic, count in sorted(partitions_per_topic.items()):
            for p in range(count):
                for _ in range(len(members)):
                    member = members[turn % len(members)]
                    turn += 1
                    if topic in subscriptions[member].topics:
                        result[member].append(TopicPartition(topic, p))
                        break
        return result


class CooperativeStickyAssignor:
    """Balanced like round-robin, but members keep the partitions they own where balance allows
    (sticky), and a partition that moves between members is left unassigned for one round so its
    old owner can revoke it first (KIP-429's incremental cooperative protocol)."""

    name = "cooperative-sticky"
    rebalance_protocol = COOPERATIVE

    def assign(self, partitions_per_topic, subscriptions):
        sticky = self.sticky_assign(partitions_per_topic, subscriptions)
        # A partition owned by someone else must first be revoked by its owner: hold it back.
        previous_owner = {tp: member for tp, (_gen, member) in _owners(subscriptions).items()}
        return {
            member: [tp for tp in tps if previous_owner.get(tp, member) == member]
            for member, tps in sticky.items()
        }

    @staticmethod
    def sticky_assign(partitions_per_topic, subscriptions) -> dict[str, list[TopicPartition]]:
        members = sorted(subscriptions)
        all_partitions = [
            TopicPartition(t, p)
            for t, n in sorted(partitions_per_topic.items())
            if any(t in subscriptions[m].topics for m in members)
            for p in range(n)
        ]
        valid = set(all_partitions)
        result: dict[str, list[TopicPartition]] = {m: [] for m in members}
        if not members:
            return result
        # 1. Keep what each member owns and may still have; a partition claimed twice goes to the
        #    claim with the highest generation (the other one is stale).
        claims = {
            tp: claim
            for tp, claim in _owners(subscriptions).items()
            if tp in valid and tp.topic in subscriptions[claim[1]].topics
        }
        for tp, (_gen, member) in sorted(claims.items()):
            result[member].append(tp)
        # 2. Trim members above their fair share (uniform quotas: floor, and ceil for n % m of them).
        floor_quota, extra = divmod(len(all_partitions), len(members))
        unassigned = [tp for tp in all_partitions if tp not in claims]
        for member in sorted(members, key=lambda m: (-len(result[m]), m)):
            quota = floor_quota + (1 if extra > 0 else 0)
            if len(result[member]) >= quota and extra > 0 and quota > floor_quota:
                extra -= 1
            if len(result[member]) > quota:
                unassigned.extend(result[member][quota:])
                del result[member][quota:]
        # 3. Hand out the rest to the eligible member with the fewest partitions.
        for tp in sorted(unassigned):
            eligible = [m for m in members if tp.topic in subscriptions[m].topics]
            target = min(eligible, key=lambda m: (len(result[m]), m))
            result[target].append(tp)
        # 4. Non-uniform subscriptions can still leave imbalance: move single partitions from the most
        #    to the least loaded eligible member while that narrows the gap.
        for _ in range(len(all_partitions) * len(members)):
            moved = False
            for donor in sorted(members, key=lambda m: (-len(result[m]), m)):
                for tp in list(result[donor]):
                    eligible = [m for m in members if m != donor and tp.topic in subscriptions[m].topics]
                    if not eligible:
                        continue
                    taker = min(eligible, key=lambda m: (len(result[m]), m))
                    if len(result[donor]) - len(result[taker]) > 1:
                        result[donor].remove(tp)
                        result[taker].append(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break
        return {m: sorted(tps) for m, tps in result.items()}


def _owners(subscriptions: dict[str, Subscription]) -> dict[TopicPartition, tuple[int, str]]:
    """The claimed owner of each partition: the claim with the highest generation wins (the others
    are stale), ties go to the lowest member id."""
    claims: dict[TopicPartition, tuple[int, str]] = {}
    for member in sorted(subscriptions):
        sub = subscriptions[member]
        for tp in sub.owned_partitions:
            if tp not in claims or sub.generation_id > claims[tp][0]:
                claims[tp] = (sub.generation_id, member)
    return claims


ASSIGNORS: dict[str, type] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def assignors_for(names: list[str]) -> list[Assignor]:
    """Assignor objects for config names (already normalised by ConsumerConfig), in preference order."""
    return [ASSIGNORS[name]() for name in names]
