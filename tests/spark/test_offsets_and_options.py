"""Offset planning and option parsing of the Spark source and sink (pure: no Spark, no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.spark.offsets import (
    OffsetRange,
    limit_end,
    offsets_at_timestamps,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_spec,
    split_ranges,
    timestamps_for,
)
from onceflow.spark.options import (
    EARLIEST,
    parse_offset_spec,
    parse_source_options,
)
from onceflow.spark.sink_options import AT_LEAST_ONCE, check_sink_schema, parse_sink_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_offsets_json_is_sparks_kafka_format_and_round_trips():
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(as_json) == offsets


def test_resolve_spec_earliest_latest_and_json_taken_as_given():
    tps = [("t", 0), ("t", 1), ("t", 2)]
    earliest = {("t", 0): 0, ("t", 1): 10, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 50, ("t", 2): 30}
    assert resolve_spec("earliest", tps, earliest, latest, option="x") == earliest
    assert resolve_spec("latest", tps, earliest, latest, option="x") == latest
    spec = parse_offset_spec('{"t": {"0": 42, "1": 3, "2": -2}}', "startingOffsets")
    # 3 is below partition 1's log start: kept, for the read to report as data loss; -2 means earliest.
    assert resolve_spec(spec, tps, earliest, latest, option="startingOffsets") == {
        ("t", 0): 42,
        ("t", 1): 3,
        ("t", 2): 0,
    }


def test_a_json_spec_must_name_every_partition_read_as_in_spark():
    """{"t": {"0": 1000}} on a 3-partition topic read nothing from partitions 1 and 2, silently."""
    tps = [("t", 0), ("t", 1), ("t", 2)]
    ends = {tp: 0 for tp in tps}
    partial = parse_offset_spec('{"t": {"0": 1000}}', "startingOffsets")
    with pytest.raises(ValueError, match=r"startingOffsets: no offset for t-1, t-2") as refused:
        resolve_spec(partial, tps, ends, ends, option="startingOffsets")
    assert "Give one for every partition read (-2 for earliest, -1 for latest)" in str(refused.value)
    extra = parse_offset_spec('{"t": {"0": 1, "1": 1, "2": 1}, "u": {"0": 1}}', "startingOffsets")
    with pytest.raises(ValueError, match="u-0, which is not read"):
        resolve_spec(extra, tps, ends, ends, option="startingOffsets")


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
    assert batch.matches("xin-1")  # found anywhere in the name, as Spark 4 finds it
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
        ({**BOOT, "subscribe": "a", "startingTimestamp": "yesterday"}, True, "startingTimestamp"),
        ({**BOOT, "subscribe": "a", "startingTimestamp": "-5"}, True, "milliseconds"),
        (
            {**BOOT, "subscribe": "a", "startingOffsetsByTimestamp": '{"a": 5}'},
            True,
            "startingOffsetsByTimestamp",
        ),
        (
            {**BOOT, "subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": -1}}'},
            False,
            "endingOffsetsBy",
        ),
        ({**BOOT, "subscribe": "a", "endingTimestamp": "5"}, True, "batch reads only"),
        ({**BOOT, "subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, True, "error"),
        ({**BOOT, "subscribe": "a", "minPartitions": "0"}, True, "minPartitions"),
        ({**BOOT, "subscribe": " , "}, True, "names no topic"),
        ({**BOOT, "assign": "[0]"}, True, "assign"),
        ({**BOOT, "subscribePattern": " "}, True, "subscribePattern is empty"),
        ({**BOOT, "subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, False, "can't be latest"),
        ({**BOOT, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "can't be earliest"),
        ({**BOOT, "subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, True, "use -2"),
        (
            {
                **BOOT,
                "subscribe": "a",
                "startingOffsets": '{"a": {"0": 5}}',
                "endingOffsets": '{"a": {"1": 9}}',
            },
            False,
            "must name the same partitions",
        ),
        (
            {
                **BOOT,
                "subscribe": "a",
                "startingOffsets": '{"a": {"0": 9}}',
                "endingOffsets": '{"a": {"0": 5}}',
            },
            False,
            r"a-0 \(9\) is after its endingOffsets \(5\)",
        ),
        (
            {**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            True,
            "higher than",
        ),
        (
            {**BOOT, "subscribe": "a", "maxTriggerDelay": "soon"},
            True,
            "maxTriggerDelay='soon' is not a duration",
        ),
        ({**BOOT, "subscribe": "a", "includeHeaders": "1"}, True, "includeHeaders"),
        (
            {**BOOT, "subscribe": "a", "kafkaConsumer.pollTimeoutMs": "-1"},
            True,
            "kafkaConsumer.pollTimeoutMs",
        ),
        ({**BOOT, "subscribe": "a", "maxRecordsPerPartition": "0"}, True, "maxRecordsPerPartition"),
        (
            {**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "earliest"},
            True,
            "set the source option startingOffsets",
        ),
        ({**BOOT, "subscribe": "a", "kafka.value.deserializer": "x"}, True, "values are read as bytes"),
        ({**BOOT, "subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "commits no offsets"),
        ({**BOOT, "subscribe": "a", "kafka.interceptor.classes": "x"}, True, "interceptors"),
        ({**BOOT, "subscribe": "a", "kafka.ssl.truststore.type": "JKS"}, True, "PEM files only"),
        ({**BOOT, "subscribe": "a", "kafka.sasl.kerberos.service.name": "kafka"}, True, "no Kerberos"),
        ({**BOOT, "subscribe": "a", "kafka.isolation.level": "sometimes"}, True, "read_committed"),
        (
            {**BOOT, "subscribe": "a", "kafka.max.partition.fetch.bytes": "x"},
            True,
            "kafka.max.partition.fetch.bytes",
        ),
        ({**BOOT, "subscribe": "a", "path": "/data"}, True, "does not know the option"),
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
    assert parse_sink_options({**BOOT, "checkpointlocation": "/c", "queryname": "q"}).topic is None


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"guarantee": "maybe"}, "guarantee"),
        (
            {"kafka.lingr.ms": "5"},
            r"kafka.lingr.ms: 'lingr.ms' is not a Kafka producer setting; did you mean kafka.linger.ms\?",
        ),
        ({"kafka.linger.ms": "soon"}, r"linger.ms='soon' is not an integer"),
        (
            {"kafka.acks": "1"},
            "acks=1: idempotence needs acks=all",
        ),  # exactly-once needs a transactional producer
        ({"kafka.enable.idempotence": "false"}, "enable.idempotence"),
        ({"kafka.key.serializer": "x"}, "keys are written as bytes"),
        ({"kafka.transactional.id": "x"}, "transactional.id.prefix"),
        ({"kafka.security.protocol": "TLS"}, "use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}, "needs sasl.username"),
        ({"kafka.ssl.keystore.type": "JKS"}, "PEM files only"),
        ({"topik": "out"}, r"does not know the option\(s\) topik \(did you mean topic\?\)"),
        ({"topic": " "}, "option topic is empty"),
        ({"includeHeaders": "yes"}, "includeHeaders='yes' must be true or false"),
    ],
)
def test_bad_sink_options_name_the_problem(options, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_sink_options({**BOOT, **options})


def test_sink_columns_are_checked_as_spark_does():
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    def schema(**columns):
        return StructType([StructField(name, kind) for name, kind in columns.items()])

    check_sink_schema(schema(value=StringType(), key=BinaryType(), partition=IntegerType()), "out")
    check_sink_schema(schema(value=BinaryType(), topic=StringType()), None)
    check_sink_schema(schema(value=BinaryType(), topic=LongType()), "out")  # the option overrides it
    for columns, topic, complaint in [
        ({"key": StringType()}, "out", 'needs a "value" column'),
        ({"value": StringType()}, None, 'set the option "topic", or give the rows a "topic" column'),
        ({"value": StringType(), "topic": LongType()}, None, '"topic" column is bigint; it must be string'),
        ({"value": LongType()}, "out", '"value" column is bigint; it must be string or binary'),
        ({"value": StringType(), "partition": LongType()}, "out", '"partition" column is bigint'),
    ]:
        with pytest.raises(ValueError, match=complaint):
            check_sink_schema(schema(**columns), topic)


def test_timestamp_options_take_precedence_as_in_spark():
    opts = parse_source_options(
        {
            **BOOT,
            "subscribe": "a",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
            "startingTimestamp": "1700000000000",
            "endingOffsetsByTimestamp": '{"a": {"0": 9, "1": 10}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
            "minPartitions": "8",
        },
        streaming=False,
    )
    assert opts.starting_timestamps == 1_700_000_000_000  # the global one wins
    assert opts.ending_timestamps == {"a": {0: 9, 1: 10}}
    assert opts.timestamp_strategy == "latest"
    assert opts.min_partitions == 8
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).timestamp_strategy == "error"


def test_options_the_source_does_not_know_are_refused_with_the_nearest_name():
    with pytest.raises(ValueError, match=r"startingofsets \(did you mean startingOffsets\?\)"):
        parse_source_options({**BOOT, "subscribe": "a", "startingOfsets": "earliest"}, streaming=True)
    with pytest.raises(ValueError, match=r"'bogus.thing' is not a Kafka consumer setting"):
        parse_source_options({**BOOT, "subscribe": "a", "kafka.bogus.thing": "1"}, streaming=True)


def test_options_without_effect_are_named_in_a_warning(caplog):
    parse_source_options(
        {**BOOT, "subscribe": "a", "kafka.fetch.min.bytes": "5", "groupIdPrefix": "g"}, streaming=True
    )
    assert "kafka.fetch.min.bytes" in caplog.text and "groupIdPrefix has no effect" in caplog.text
    caplog.clear()
    parse_source_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)
    assert "maxOffsetsPerTrigger ignored in batch reads" in caplog.text


def test_new_source_options_parse_as_spark_writes_them():
    opts = parse_source_options(
        {
            **BOOT,
            "subscribe": "a",
            "includeHeaders": "TRUE",
            "kafkaConsumer.pollTimeoutMs": "5000",
            "fetchOffset.numRetries": "2",
            "fetchOffset.retryIntervalMs": "10",
            "minOffsetsPerTrigger": "10",
            "maxOffsetsPerTrigger": "20",
            "maxTriggerDelay": "2m",
            "maxRecordsPerPartition": "100",
            "kafka.request.timeout.ms": "7000",
        },
        streaming=True,
    )
    assert opts.include_headers and opts.poll_timeout_ms == 5000
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms) == (2, 10)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (10, 120_000)
    assert opts.max_records_per_partition == 100 and opts.request_timeout_s == 7.0
    defaults = parse_source_options({**BOOT, "subscribe": "a"}, streaming=True)
    assert not defaults.include_headers and defaults.max_trigger_delay_ms == 15 * 60_000


def test_timestamps_for_needs_every_partition_read_and_no_other():
    tps = [("t", 0), ("t", 1)]
    assert timestamps_for(7, tps, "startingTimestamp") == {("t", 0): 7, ("t", 1): 7}
    assert timestamps_for({"t": {0: 1, 1: 2}}, tps, "x") == {("t", 0): 1, ("t", 1): 2}
    with pytest.raises(ValueError, match="no timestamp for t-1"):
        timestamps_for({"t": {0: 1}}, tps, "startingOffsetsByTimestamp")
    with pytest.raises(ValueError, match="u-0, which is not read"):
        timestamps_for({"t": {0: 1, 1: 2}, "u": {0: 3}}, tps, "startingOffsetsByTimestamp")


def test_a_partition_without_a_record_after_the_timestamp_fails_or_starts_at_latest():
    found = {("t", 0): 4, ("t", 1): -1}
    stamps = {("t", 0): 100, ("t", 1): 100}
    latest = {("t", 0): 9, ("t", 1): 30}
    assert offsets_at_timestamps(found, stamps, latest, strategy="latest", option="x") == {
        ("t", 0): 4,
        ("t", 1): 30,
    }
    with pytest.raises(ValueError, match="t-1 has no record at or after timestamp 100.*Strategy=latest"):
        offsets_at_timestamps(found, stamps, latest, strategy="error", option="startingTimestamp")


def test_split_ranges_cuts_in_proportion_to_size_and_covers_every_offset_once():
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 10, 110), OffsetRange("t", 2, EARLIEST, 5)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 3) == ranges
    cut = split_ranges(ranges, 8)
    # 300 of 400 offsets -> 6 parts of 50; 100 -> 2 parts of 50; the EARLIEST range (size unknown) stays.
    assert cut == [
        *(OffsetRange("t", 0, 50 * i, 50 * (i + 1)) for i in range(6)),
        OffsetRange("t", 1, 10, 60),
        OffsetRange("t", 1, 60, 110),
        OffsetRange("t", 2, EARLIEST, 5),
    ]
    assert split_ranges([OffsetRange("t", 0, 0, 2)], 10) == [
        OffsetRange("t", 0, 0, 1),
        OffsetRange("t", 0, 1, 2),
    ]


def test_split_ranges_caps_the_records_per_partition():
    ranges = [OffsetRange("t", 0, 0, 250), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, EARLIEST, 5)]
    assert split_ranges(ranges, None, 100) == [
        OffsetRange("t", 0, 0, 83),
        OffsetRange("t", 0, 83, 166),
        OffsetRange("t", 0, 166, 250),
        OffsetRange("t", 1, 0, 100),
        OffsetRange("t", 2, EARLIEST, 5),
    ]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 1000)), min_size=1, max_size=6),
    st.integers(1, 50),
    st.one_of(st.none(), st.integers(1, 400)),
)
def test_split_ranges_property(pairs, min_partitions, max_records):
    ranges = [OffsetRange("t", i, lo, lo + n) for i, (lo, n) in enumerate(pairs)]
    cut = split_ranges(ranges, min_partitions, max_records)
    assert split_ranges(ranges, min_partitions, max_records) == cut  # the same cut for a replay
    for r in ranges:
        parts = [c for c in cut if c.partition == r.partition]
        assert parts[0].from_offset == r.from_offset and parts[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(parts, parts[1:], strict=False))
        assert all(c.from_offset < c.until_offset for c in parts)
        assert max_records is None or all(c.until_offset - c.from_offset <= max_records for c in parts)
