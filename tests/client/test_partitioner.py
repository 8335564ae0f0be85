"""The key partitioner must put keys where Java's producer puts them."""

import os

import pytest

from onceflow.client.partitioner import RoundRobin, _murmur2_py, murmur2, partition_for_key


@pytest.mark.parametrize(
    ("key", "signed_hash"),
    [
        # Values from Kafka's UtilsTest.testMurmur2 (Java's Utils.murmur2 returns a signed int).
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
)
def test_murmur2_matches_java(key, signed_hash):
    assert murmur2(key) == signed_hash & 0xFFFFFFFF
    assert _murmur2_py(key) == signed_hash & 0xFFFFFFFF


def test_pure_python_fallback_agrees_with_c():
    for length in range(40):
        key = os.urandom(length)
        assert _murmur2_py(key) == murmur2(key)


def test_partition_for_key_is_positive_modulo():
    assert partition_for_key(b"21", 3) == (-973932308 & 0x7FFFFFFF) % 3
    assert {partition_for_key(f"k{i}".encode(), 4) for i in range(200)} == {0, 1, 2, 3}


def test_round_robin_cycles():
    rr = RoundRobin()
    assert [rr.next_partition(3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
