"""Where a record goes: murmur2 for keys (as Java), round robin, or uniform sticky (KIP-794).

A partitioner answers ``partition(topic, key, num_partitions)`` and hears ``record_appended(topic,
partition, size)`` after each record, which the sticky partitioner uses to move on once a batch's
worth of bytes went to its current partition. Explicit partitions given to ``send`` bypass them.
"""

from __future__ import annotations

import random

from onceflow.client.partitioner import partition_for_key


class RoundRobinPartitioner:
    """Every record (keyed or not) to the next partition in turn, per topic (Kafka's RoundRobinPartitioner)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % num_partitions

    def record_appended(self, topic: str, partition: int, size: int) -> None:
        pass


class UniformStickyPartitioner:
    """Keyless records stay on one partition until ``batch_size`` bytes went there, then move to another
    partition picked at random (KIP-794's uniform sticky; without its adaptive weighting by queue size).

    Sticking fills batches, so fewer and larger batches go out than with round robin; switching after a
    batch's worth of bytes (not after each batch is sent, KIP-480's flaw) spreads records evenly.
    """

    def __init__(self, batch_size: int, *, rng: random.Random | None = None) -> None:
        self.batch_size = batch_size
        self._random = rng or random.Random()
        self._current: dict[str, int] = {}  # topic -> sticky partition
        self._produced: dict[str, int] = {}  # topic -> bytes sent to it since it was picked
        self._previous: dict[str, int] = {}  # topic -> the partition just left

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._pick(topic, num_partitions)
        return current

    def record_appended(self, topic: str, partition: int, size: int) -> None:
        if self._current.get(topic) != partition:
            return  # a keyed or explicitly placed record: not ours to count
        produced = self._produced[topic] + size
        if produced >= self.batch_size:
            del self._current[topic]  # the next keyless record picks a new partition
            self._previous[topic] = partition
        else:
            self._produced[topic] = produced

    def _pick(self, topic: str, num_partitions: int) -> int:
        leaving = self._previous.pop(topic, None)
        if num_partitions == 1:
            choice = 0
        elif leaving is None or leaving >= num_partitions:
            choice = self._random.randrange(num_partitions)
        else:
            choice = self._random.randrange(num_partitions - 1)
            if choice >= leaving:
                choice += 1  # uniform over the other partitions
        self._current[topic] = choice
        self._produced[topic] = 0
        return choice


class DefaultPartitioner:
    """Kafka's built-in partitioner: murmur2 of the key (same partition as the Java client), uniform
    sticky for records without a key (or for all records with ``partitioner.ignore.keys``)."""

    def __init__(
        self, batch_size: int, *, ignore_keys: bool = False, rng: random.Random | None = None
    ) -> None:
        self.sticky = UniformStickyPartitioner(batch_size, rng=rng)
        self.ignore_keys = ignore_keys

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is None or self.ignore_keys:
            return self.sticky.partition(topic, key, num_partitions)
        return partition_for_key(key, num_partitions)

    def record_appended(self, topic: str, partition: int, size: int) -> None:
        self.sticky.record_appended(topic, partition, size)


def partitioner_for(config) -> DefaultPartitioner | RoundRobinPartitioner:
    """The partitioner a :class:`~onceflow.client.producer.config.ProducerConfig` asks for."""
    if config.round_robin:
        return RoundRobinPartitioner()
    return DefaultPartitioner(config.batch_size, ignore_keys=config.partitioner_ignore_keys)
