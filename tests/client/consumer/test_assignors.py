"""Assignors and the consumer protocol bytes (pure)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.client.consumer.classic.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from onceflow.client.consumer.structs import TopicPartition as TP


def subs(members, topics=("a",), owned=None, generation=1):
    owned = owned or {}
    return {m: Subscription(list(topics), owned.get(m, []), None, generation) for m in members}


def test_subscription_and_assignment_round_trip():
    sub = Subscription(["b", "a"], [TP("a", 1), TP("a", 0)], b"ud", 7)
    back = decode_subscription(encode_subscription(sub))
    assert sorted(back.topics) == ["a", "b"]
    assert sorted(back.owned_partitions) == [TP("a", 0), TP("a", 1)]
    assert back.user_data == b"ud" and back.generation_id == 7
    assignment = Assignment([TP("x", 2), TP("y", 0)])
    assert sorted(decode_assignment(encode_assignment(assignment)).partitions) == [TP("x", 2), TP("y", 0)]
    assert decode_assignment(b"").partitions == []


def test_range_gives_first_members_the_extra_partitions():
    result = RangeAssignor().assign({"a": 7}, subs(["m2", "m1", "m3"]))
    assert result["m1"] == [TP("a", p) for p in (0, 1, 2)]
    assert result["m2"] == [TP("a", p) for p in (3, 4)]
    assert result["m3"] == [TP("a", p) for p in (5, 6)]


def test_roundrobin_deals_partitions_in_turn_and_skips_unsubscribed():
    s = {"m1": Subscription(["a", "b"]), "m2": Subscription(["a"])}
    result = RoundRobinAssignor().assign({"a": 2, "b": 2}, s)
    assert result["m1"] == [TP("a", 0), TP("b", 0), TP("b", 1)]
    assert result["m2"] == [TP("a", 1)]


def test_cooperative_sticky_keeps_owned_and_holds_back_moving_partitions():
    first = CooperativeStickyAssignor().assign({"a": 6}, subs(["m1"]))
    assert first["m1"] == [TP("a", p) for p in range(6)]
    # m2 joins: m1 keeps 3 of its partitions; the 3 that move are not given to m2 until m1 revoked them.
    second = CooperativeStickyAssignor().assign({"a": 6}, subs(["m1", "m2"], owned={"m1": first["m1"]}))
    assert len(second["m1"]) == 3 and set(second["m1"]) < set(first["m1"])
    assert second["m2"] == []
    # Next round, m1 reports only what it kept: m2 gets the rest.
    third = CooperativeStickyAssignor().assign({"a": 6}, subs(["m1", "m2"], owned={"m1": second["m1"]}))
    assert third["m1"] == second["m1"]
    assert sorted(third["m1"] + third["m2"]) == [TP("a", p) for p in range(6)]


@settings(max_examples=60, deadline=None)
@given(
    partitions=st.integers(min_value=0, max_value=12),
    members=st.integers(min_value=1, max_value=4),
    seed=st.randoms(use_true_random=False),
)
def test_sticky_assignment_is_complete_disjoint_and_balanced(partitions, members, seed):
    names = [f"m{i}" for i in range(members)]
    everything = [TP("a", p) for p in range(partitions)]
    owned: dict[str, list[TP]] = {m: [] for m in names}
    for tp in everything:
        if seed.random() < 0.7:
            owned[seed.choice(names)].append(tp)
    result = CooperativeStickyAssignor.sticky_assign({"a": partitions}, subs(names, owned=owned))
    flat = list(itertools.chain.from_iterable(result.values()))
    assert sorted(flat) == everything  # every partition exactly once
    sizes = [len(v) for v in result.values()]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()])
def test_every_assignor_covers_all_partitions_once(assignor):
    result = assignor.assign({"a": 6, "b": 3}, subs(["m1", "m2", "m3"], topics=("a", "b")))
    flat = sorted(itertools.chain.from_iterable(result.values()))
    assert flat == sorted([TP("a", p) for p in range(6)] + [TP("b", p) for p in range(3)])
