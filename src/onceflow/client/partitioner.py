"""Kafka's default partitioner for keyed records: murmur2 of the key, as Java's ``Utils.murmur2``.

Keyed records land where Java, librdkafka (``murmur2_random``) and kafka-python put them, so data
written by any of them is partitioned alike. Records without a key go round robin here (Kafka's
sticky partitioner is a batching optimisation the full producer will add).
"""

from __future__ import annotations

import itertools

try:  # a C implementation, ~14x faster; optional
    from murmurhash2 import murmurhash2 as _c_murmur2
except ImportError:  # pragma: no cover - depends on the environment
    _c_murmur2 = None

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(key: bytes) -> int:
    """Java-compatible 32-bit murmur2 of ``key`` (unsigned)."""
    if _c_murmur2 is not None:
        return _c_murmur2(key, MURMUR2_SEED) & _MASK32
    return _murmur2_py(key)


def _murmur2_py(data: bytes) -> int:
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    whole = length - (length % 4)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``toPositive(murmur2(key)) % numPartitions``, as Kafka's BuiltInPartitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class RoundRobin:
    """Spreads records without a key over the partitions in turn."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def next_partition(self, num_partitions: int) -> int:
        return next(self._counter) % num_partitions
