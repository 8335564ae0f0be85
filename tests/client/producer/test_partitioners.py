"""Partitioners: murmur2 as Java for keys, round robin, uniform sticky (KIP-794) without keys."""

import random
from collections import Counter

import pytest

from onceflow.client.producer import ProducerConfig
from onceflow.client.producer.partitioners import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    UniformStickyPartitioner,
    partitioner_for,
)


@pytest.mark.parametrize(
    ("key", "signed_hash"),
    [(b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536)],
)
@pytest.mark.parametrize("partitions", [1, 3, 12])
def test_keyed_records_go_where_java_puts_them(key, signed_hash, partitions):
    # Java: Utils.toPositive(Utils.murmur2(key)) % numPartitions, hashes from Kafka's UtilsTest.
    expected = (signed_hash & 0x7FFFFFFF) % partitions
    assert DefaultPartitioner(16384).partition("t", key, partitions) == expected


def test_keyed_records_ignore_stickiness():
    partitioner = DefaultPartitioner(100)
    first = partitioner.partition("t", b"same", 8)
    for _ in range(50):
        partitioner.record_appended("t", first, 1000)
        assert partitioner.partition("t", b"same", 8) == first


def test_sticky_stays_until_a_batch_worth_of_bytes_then_moves():
    sticky = UniformStickyPartitioner(batch_size=1000, rng=random.Random(1))
    first = sticky.partition("t", None, 4)
    for _ in range(9):  # 900 bytes: still below batch.size
        assert sticky.partition("t", None, 4) == first
        sticky.record_appended("t", first, 100)
    assert sticky.partition("t", None, 4) == first
    sticky.record_appended("t", first, 100)  # 1000 bytes: time to move
    assert sticky.partition("t", None, 4) != first


def test_sticky_spreads_evenly_over_many_batches():
    sticky = UniformStickyPartitioner(batch_size=1000, rng=random.Random(7))
    counts = Counter()
    for _ in range(40_000):
        p = sticky.partition("t", None, 4)
        counts[p] += 1
        sticky.record_appended("t", p, 100)
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) < 1.25 * min(counts.values())


def test_sticky_is_per_topic_and_handles_one_partition():
    sticky = UniformStickyPartitioner(batch_size=10, rng=random.Random(3))
    assert sticky.partition("one", None, 1) == 0
    sticky.record_appended("one", 0, 50)
    assert sticky.partition("one", None, 1) == 0
    a = sticky.partition("a", None, 16)
    sticky.record_appended("b", a, 50)  # another topic's bytes do not move topic a
    assert sticky.partition("a", None, 16) == a


def test_round_robin_cycles_per_topic_keys_included():
    rr = RoundRobinPartitioner()
    assert [rr.partition("t", b"k", 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert rr.partition("u", None, 3) == 0


def test_config_picks_the_partitioner():
    assert isinstance(
        partitioner_for(ProducerConfig(partitioner_class="RoundRobinPartitioner")), RoundRobinPartitioner
    )
    default = partitioner_for(ProducerConfig(partitioner_ignore_keys=True))
    assert isinstance(default, DefaultPartitioner) and default.ignore_keys
