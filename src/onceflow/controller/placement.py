"""Where a new partition's replicas go (Kafka's ``StripedReplicaPlacer``).

Brokers are grouped by rack; each partition takes its first replica from the next rack in turn (an
unfenced broker of it), and its other replicas from the following racks, one per rack while racks
last, so replicas spread over racks and leaderships (the first replica) spread over brokers. Start
offsets are random (a seeded ``random.Random``: the controller is deterministic under test); once
every broker has led one partition of the request the order is reshuffled, so large topics do not
repeat one pattern.

onceflow places replicas on *active* brokers only (registered, unfenced, not shutting down):
Kafka's placer may also put them on fenced brokers, which then join the ISR later; the issue asks
for replicas over the live brokers, and a replication factor above their number is
INVALID_REPLICATION_FACTOR.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from onceflow.protocol.errors import InvalidReplicationFactor


class _Rack:
    __slots__ = ("brokers", "offset", "index", "epoch")

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.offset = 0
        self.index = 0
        self.epoch = 0

    def next(self, epoch: int) -> int | None:
        """The next broker of this rack for placement round ``epoch``, or None once all were used."""
        if not self.brokers:
            return None
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return None
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


class StripedPlacer:
    """Places one request's partitions; make one per request (it keeps the striping position)."""

    def __init__(self, brokers: Iterable[tuple[int, str | None]], rng: random.Random) -> None:
        self.rng = rng
        self.racks: dict[str | None, _Rack] = {}
        for broker_id, rack in brokers:
            self.racks.setdefault(rack, _Rack()).brokers.append(broker_id)
        self.count = sum(len(r.brokers) for r in self.racks.values())
        for rack in self.racks.values():
            rack.brokers.sort()
            rack.offset = rng.randrange(len(rack.brokers))
        # Kafka orders racks with "no rack" first, then by name.
        self.names = sorted(self.racks, key=lambda name: (name is not None, name or ""))
        self.offset = rng.randrange(len(self.names)) if self.names else 0
        self.epoch = 0

    def _shuffle(self) -> None:
        self.rng.shuffle(self.names)
        for rack in self.racks.values():
            self.rng.shuffle(rack.brokers)

    def place(self, replication_factor: int) -> list[int]:
        if replication_factor <= 0:
            raise InvalidReplicationFactor(
                f"Invalid replication factor {replication_factor}: the replication factor must be positive."
            )
        if self.count == 0:
            raise InvalidReplicationFactor("All brokers are currently fenced or in controlled shutdown.")
        if replication_factor > self.count:
            raise InvalidReplicationFactor(
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{self.count} broker(s) are registered and unfenced."
            )
        if self.epoch == self.count and self.count > 1:
            self._shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        chosen: list[int] = []
        first_rack = self.offset
        while True:
            broker = self.racks[self.names[first_rack]].next(self.epoch)
            if broker is not None:
                chosen.append(broker)
                break
            first_rack = (first_rack + 1) % len(self.names)
        rack_index = self.offset
        while len(chosen) < replication_factor:
            broker = None
            if rack_index == first_rack:
                first_rack = -1
            else:
                broker = self.racks[self.names[rack_index]].next(self.epoch)
            rack_index = (rack_index + 1) % len(self.names)
            if broker is not None:
                chosen.append(broker)
        self.epoch += 1
        self.offset += 1
        return chosen

    def place_all(self, partitions: int, replication_factor: int) -> list[list[int]]:
        return [self.place(replication_factor) for _ in range(partitions)]
