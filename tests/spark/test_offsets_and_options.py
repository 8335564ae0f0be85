"""Offset planning and option parsing of the Spark source and sink (pure: no Spark, no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.spark.offsets import (
    OffsetRange,
    limit_end,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_spec,
)
from onceflow.spark.options import (
    AT_LEAST_ONCE,
    EARLIEST,
    LATEST,
    parse_offset_spec,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_offsets_json_is_sparks_kafka_format_and_round_trips():
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(as_json) == offsets


def test_resolve_spec_earliest_latest_json_and_clamping():
    tps = [("t", 0), ("t", 1), ("t", 2)]
    earliest = {("t", 0): 0, ("t", 1): 10, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 50, ("t", 2): 30}
    assert resolve_spec("earliest", tps, earliest, latest, missing=LATEST) == earliest
    assert resolve_spec("latest", tps, earliest, latest, missing=LATEST) == latest
    spec = parse_offset_spec('{"t": {"0": 42, "1": 3, "2": -2}}', "startingOffsets")
    # 3 is below partition 1's log start: clamped up; -2 means earliest.
    assert resolve_spec(spec, tps, earliest, latest, missing=LATEST) == {
        ("t", 0): 42,
        ("t", 1): 10,
        ("t", 2): 0,
    }
    partial = parse_offset_spec('{"t": {"0": 1000}}', "startingOffsets")
    resolved = resolve_spec(partial, tps, earliest, latest, missing=EARLIEST)
    assert resolved == {("t", 0): 100, ("t", 1): 10, ("t", 2): 0}


def test_limit_end_shares_in_proportion_and_never_exceeds_the_limit():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 5}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 5}
    end = limit_end(start, latest, 200)
    assert end == {("t", 0): 150, ("t", 1): 50, ("t", 2): 5}
    assert limit_end(start, latest, 10_000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    st.integers(1, 3000),
)
def test_limit_end_property(pairs, limit):
    start = {("t", i): lo for i, (lo, _n) in enumerate(pairs)}
    latest = {("t", i): lo + n for i, (lo, n) in enumerate(pairs)}
    end = limit_end(start, latest, limit)
    admitted = sum(end[tp] - start[tp] for tp in start)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert admitted == min(limit, backlog)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_plan_ranges_skips_idle_partitions_and_reads_new_ones_from_earliest():
    start = {("t", 0): 10, ("t", 1): 20}
    end = {("t", 0): 15, ("t", 1): 20, ("t", 2): 7}
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 10, 15), OffsetRange("t", 2, EARLIEST, 7)]


def test_source_options_defaults_and_names():
    opts = parse_source_options({**BOOT, "subscribe": "a, b"}, streaming=True)
    assert opts.subscribe == ("a", "b")
    assert opts.starting_offsets == "latest"
    assert opts.isolation_level == 1  # read_committed by default
    assert opts.max_offsets_per_trigger is None
    assert opts.fail_on_data_loss  # Spark's default
    assert not parse_source_options(
        {**BOOT, "subscribe": "a", "failOnDataLoss": "False"}, streaming=True
    ).fail_on_data_loss
    batch = parse_source_options({**BOOT, "subscribePattern": "in-.*"}, streaming=False)
    assert batch.starting_offsets == "earliest" and batch.matches("in-1") and not batch.matches("out")
    assigned = parse_source_options(
        {
            **BOOT,
            "assign": '{"a": [0, 2]}',
            "isolation.level": "read_uncommitted",
            "maxOffsetsPerTrigger": "5",
        },
        streaming=True,
    )
    assert assigned.assign == {"a": (0, 2)}
    assert assigned.isolation_level == 0 and assigned.max_offsets_per_trigger == 5


@pytest.mark.parametrize(
    ("options", "streaming", "complaint"),
    [
        ({"subscribe": "a"}, True, "kafka.bootstrap.servers"),
        ({**BOOT}, True, "exactly one"),
        ({**BOOT, "subscribe": "a", "assign": '{"a": [0]}'}, True, "exactly one"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "{bad"}, True, "startingOffsets"),
        ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, True, "batch reads only"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, False, "streaming"),
        ({**BOOT, "subscribePattern": "("}, True, "regex"),
        ({**BOOT, "subscribe": "a", "failOnDataLoss": "sometimes"}, True, "failOnDataLoss"),
    ],
)
def test_bad_source_options_name_the_problem(options, streaming, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_source_options(options, streaming=streaming)


def test_sink_options():
    opts = parse_sink_options({**BOOT, "topic": "out", "guarantee": "at-least-once", "kafka.acks": "1"})
    assert opts.topic == "out" and opts.guarantee == AT_LEAST_ONCE
    assert opts.extra == {"acks": "1", "batch.size": "262144", "linger.ms": "5"}
    assert parse_sink_options({**BOOT, "kafka.batch.size": "1000"}).extra["batch.size"] == "1000"
    assert parse_sink_options(BOOT).guarantee == "exactly-once"
    with pytest.raises(ValueError, match="guarantee"):
        parse_sink_options({**BOOT, "guarantee": "maybe"})
