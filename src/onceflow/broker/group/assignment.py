"""Partition assignments of the consumer group protocol (KIP-848) as plain values, and the two
server-side assignors Kafka offers: ``uniform`` (its default) and ``range``.

An :data:`Assignment` maps a topic id to a frozenset of partition numbers and never holds an empty
set, so two equal assignments compare equal. Assignors are pure functions of the members'
subscriptions, the subscribed topics' partition counts and the previous target assignment.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}
DEFAULT_ASSIGNOR = "uniform"


def normalize(parts: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic: frozenset(ps) for topic, ps in parts.items() if ps}


def union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return normalize({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in a.keys() | b.keys()})


def minus(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return normalize({t: ps - b.get(t, frozenset()) for t, ps in a.items()})


def intersect(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return normalize({t: ps & b[t] for t, ps in a.items() if t in b})


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


def pairs(a: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def from_pairs(items: Iterable[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    grouped: dict[uuid.UUID, set[int]] = {}
    for topic, partition in items:
        grouped.setdefault(topic, set()).add(partition)
    return normalize(grouped)


def uniform(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """Spread every subscribed partition so that members sharing a topic differ by at most one
    partition, moving as few partitions away from their previous owner as that allows (sticky).

    1. each member keeps what it had that still exists and it still subscribes to (a partition
       claimed twice stays with the first member in id order);
    2. the rest go one by one to the subscribed member with the fewest partitions;
    3. while a member has two more than another that subscribes to one of its topics, one moves.
    """
    members = sorted(subscriptions)
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member in members:
        for topic, partition in pairs(previous.get(member, EMPTY)):
            eligible = topic in subscriptions[member] and partition < partition_counts.get(topic, 0)
            if eligible and (topic, partition) not in taken:
                owned[member].add((topic, partition))
                taken.add((topic, partition))
    subscribed_topics = sorted(
        {t for topics in subscriptions.values() for t in topics if t in partition_counts}
    )
    for topic in subscribed_topics:
        candidates = [m for m in members if topic in subscriptions[m]]
        for partition in range(partition_counts[topic]):
            if (topic, partition) not in taken:
                receiver = min(candidates, key=lambda m: (len(owned[m]), m))
                owned[receiver].add((topic, partition))
                taken.add((topic, partition))
    _balance(members, subscriptions, owned)
    return {m: from_pairs(owned[m]) for m in members}


def _balance(
    members: list[str],
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    owned: dict[str, set[tuple[uuid.UUID, int]]],
) -> None:
    moved = True
    while moved:  # each move lowers the sum of squared counts, so this ends
        moved = False
        for giver in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for receiver in sorted(members, key=lambda m: (len(owned[m]), m)):
                if len(owned[giver]) - len(owned[receiver]) < 2:
                    break
                movable = sorted(tp for tp in owned[giver] if tp[0] in subscriptions[receiver])
                if movable:
                    tp = movable[-1]
                    owned[giver].remove(tp)
                    owned[receiver].add(tp)
                    moved = True
                    break
            if moved:
                break


def range_assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partition_counts: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """Per topic, contiguous ranges to its subscribers in member id order; the first
    ``partitions % subscribers`` members get one more (so equal partition numbers of
    co-partitioned topics land on the same member)."""
    del previous  # not sticky, as the classic range assignor
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partition_counts})
    for topic in topics:
        subscribers = sorted(m for m in subscriptions if topic in subscriptions[m])
        count = partition_counts[topic]
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = per + (1 if i < extra else 0)
            if size:
                result[member][topic] = frozenset(range(start, start + size))
            start += size
    return result


ASSIGNORS = {"uniform": uniform, "range": range_assign}
