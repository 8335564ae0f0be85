"""The rows of docs/spark.md marked "same": each behaviour of Spark's Kafka source and sink, one test
per row, inside the session's SparkSession. What the client does (reading and writing records) runs
against onceflow and against Tansu; what only plans or validates runs against onceflow.

Data is small (tens of records) and every streaming query uses Trigger.AvailableNow or
processAllAvailable(), so no test waits on a clock.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from tests.conftest import topic_name  # noqa: E402

from onceflow.client import SimpleClient  # noqa: E402
from onceflow.client.admin import AdminClient  # noqa: E402
from onceflow.protocol.record_codec import ProducerRecord  # noqa: E402

pytestmark = pytest.mark.spark

KAFKA_COLUMNS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]
HEADERS = ("headers", "array<struct<key:string,value:binary>>")


@pytest.fixture(params=["onceflow", "tansu"])
def server(request):
    """Tests of the client's behaviour run against both brokers."""
    return request.getfixturevalue("broker" if request.param == "onceflow" else "tansu")


def make_topic(bootstrap: str, prefix: str, partitions: int = 1, records: int = 0) -> str:
    """A new topic; record i (key k{i%3}, value v{i}, header h=i) goes to partition i % partitions.
    One record per produce request: Tansu 0.6 answers ListOffsets per batch (its latest offset is the
    last batch's base offset + 1), so with one record per batch both brokers agree."""
    topic = topic_name(prefix)
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=partitions)
        for i in range(records):
            record = ProducerRecord(f"k{i % 3}".encode(), f"v{i}".encode(), [("h", str(i).encode())])
            client.produce(topic, [record], partition=i % partitions)
    return topic


def produce(bootstrap: str, topic: str, values: list[str], partition: int = 0) -> None:
    with SimpleClient(bootstrap) as client:
        for value in values:
            client.produce(topic, [(None, value.encode())], partition=partition)


def consumed(bootstrap: str, topic: str) -> list:
    with SimpleClient(bootstrap) as client:
        return list(client.consume(topic, isolation_level="read_committed", timeout_s=1.5))


def read(spark, bootstrap: str, **options):
    reader = spark.read.format("onceflow").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def stream(spark, bootstrap: str, **options):
    reader = spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_stream(df, checkpoint: Path, *, fail: bool = False):
    """Run a streaming read with Trigger.AvailableNow into parquet files kept beside the checkpoint
    (a file sink can resume from its checkpoint; the memory sink cannot); the rows this run wrote (or,
    with ``fail``, the query's exception)."""
    output = checkpoint.with_name(checkpoint.name + "-out")
    spark = df.sparkSession
    before = _written(spark, output)
    query = (
        df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    except Exception as exc:  # StreamingQueryException
        if fail:
            return exc
        raise
    finally:
        if query.isActive:
            query.stop()
    assert not fail, "the query was expected to fail"
    after = _written(spark, output)
    for row in before:
        after.remove(row)
    return after


def _written(spark, output: Path) -> list:
    if not (output / "_spark_metadata").exists():
        return []
    return sorted(spark.read.parquet(str(output)).collect())


def values(rows) -> list[str]:
    return sorted(r.value if isinstance(r.value, str) else bytes(r.value).decode() for r in rows)


# -- source: reading -------------------------------------------------------------------------------


def test_schema_is_kafkas_and_headers_come_with_include_headers(spark, server):
    topic = make_topic(server.bootstrap, "schema", records=3)
    plain = read(spark, server.bootstrap, subscribe=topic)
    assert [(f.name, f.dataType.simpleString()) for f in plain.schema.fields] == KAFKA_COLUMNS
    with_headers = read(spark, server.bootstrap, subscribe=topic, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in with_headers.schema.fields] == [
        *KAFKA_COLUMNS,
        HEADERS,
    ]
    row = with_headers.where("offset = 1").collect()[0]
    assert (row.key, row.value, row.topic, row.partition, row.timestampType) == (b"k1", b"v1", topic, 0, 0)
    assert [(h.key, h.value) for h in row.headers] == [("h", b"1")]


def test_assign_reads_exactly_the_partitions_named(spark, server):
    topic = make_topic(server.bootstrap, "assign", partitions=3, records=9)
    rows = read(spark, server.bootstrap, assign=f'{{"{topic}": [0, 2]}}').collect()
    assert sorted((r.partition, bytes(r.value).decode()) for r in rows) == [
        (0, "v0"),
        (0, "v3"),
        (0, "v6"),
        (2, "v2"),
        (2, "v5"),
        (2, "v8"),
    ]


def test_subscribe_reads_every_topic_listed(spark, server):
    first = make_topic(server.bootstrap, "sub-a", records=2)
    second = make_topic(server.bootstrap, "sub-b", partitions=2, records=3)
    rows = read(spark, server.bootstrap, subscribe=f"{first}, {second}").collect()
    assert sorted((r.topic, bytes(r.value).decode()) for r in rows) == sorted(
        [(first, "v0"), (first, "v1"), (second, "v0"), (second, "v1"), (second, "v2")]
    )


def test_subscribe_pattern_reads_the_topics_it_matches(spark, server):
    """As Spark 4's Kafka source: the pattern is found anywhere in a topic's name."""
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    matched = [make_topic(server.bootstrap, f"{prefix}-in", records=1) for _ in range(2)]
    matched.append(make_topic(server.bootstrap, f"z{prefix}-in", records=1))
    make_topic(server.bootstrap, f"{prefix}-out", records=1)
    rows = read(spark, server.bootstrap, subscribePattern=f"{prefix}-in-").collect()
    assert sorted(r.topic for r in rows) == sorted(matched)


def test_a_subscribed_topic_that_does_not_exist_fails_the_read(spark, broker):
    missing = topic_name("missing")
    with pytest.raises(Exception, match=f"subscribed topic '{missing}' does not exist"):
        read(spark, broker.bootstrap, subscribe=missing).collect()


def test_starting_and_ending_offsets_earliest_latest_and_json(spark, server):
    topic = make_topic(server.bootstrap, "offsets", partitions=2, records=10)
    bounded = read(
        spark,
        server.bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 1, "1": -2}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 3, "1": -1}}}}',
    ).collect()
    assert sorted((r.partition, r.offset) for r in bounded) == [(0, 1), (0, 2), *((1, o) for o in range(5))]
    assert read(spark, server.bootstrap, subscribe=topic).count() == 10  # batch: earliest to latest


def test_a_stream_starts_at_latest_by_default_and_a_restart_keeps_its_offsets(spark, broker, tmp_path):
    topic = make_topic(broker.bootstrap, "latest", records=4)
    checkpoint = tmp_path / "ckpt"
    assert run_stream(stream(spark, broker.bootstrap, subscribe=topic), checkpoint) == []
    produce(broker.bootstrap, topic, ["new1", "new2"])
    # startingOffsets applies to a new query only: the restart goes on from the checkpoint.
    rows = run_stream(
        stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest"), checkpoint
    )
    assert values(rows) == ["new1", "new2"]


def test_json_starting_offsets_must_name_every_partition(spark, broker, tmp_path):
    """{"t": {"0": 2}} on a 3-partition topic used to read only partition 0, silently."""
    topic = make_topic(broker.bootstrap, "partial", partitions=3, records=9)
    partial = f'{{"{topic}": {{"0": 2}}}}'
    with pytest.raises(Exception, match=f"no offset for {topic}-1, {topic}-2"):
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=partial).collect()
    failure = run_stream(
        stream(spark, broker.bootstrap, subscribe=topic, startingOffsets=partial), tmp_path / "c", fail=True
    )
    assert f"no offset for {topic}-1, {topic}-2" in str(failure)


def test_partitions_added_to_a_stream_are_read_from_earliest(spark, broker, tmp_path):
    topic = make_topic(broker.bootstrap, "grow", partitions=1, records=2)
    checkpoint = tmp_path / "ckpt"
    assert values(
        run_stream(stream(spark, broker.bootstrap, subscribe=topic, startingOffsets="earliest"), checkpoint)
    ) == ["v0", "v1"]
    with AdminClient(broker.bootstrap) as admin:
        admin.create_partitions(topic, 2)
    produce(broker.bootstrap, topic, ["p1-a", "p1-b"], partition=1)
    assert values(run_stream(stream(spark, broker.bootstrap, subscribe=topic), checkpoint)) == [
        "p1-a",
        "p1-b",
    ]


def test_a_start_beyond_the_log_end_is_data_loss(spark, broker, tmp_path):
    """It used to read nothing from that partition, with failOnDataLoss at its default (true)."""
    topic = make_topic(broker.bootstrap, "beyond", partitions=2, records=6)
    start = f'{{"{topic}": {{"0": 500, "1": 0}}}}'
    message = f"startingOffsets is beyond the partition's end: {topic}-0 is 500 \\(the end is 3\\)"
    with pytest.raises(Exception, match=message):
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).collect()
    failure = run_stream(
        stream(spark, broker.bootstrap, subscribe=topic, startingOffsets=start), tmp_path / "a", fail=True
    )
    assert "beyond the partition's end" in str(failure) and "failOnDataLoss" in str(failure)
    # failOnDataLoss=false: a warning, and the partition starts at its end.
    lenient = {"subscribe": topic, "startingOffsets": start, "failOnDataLoss": "false"}
    assert values(read(spark, broker.bootstrap, **lenient).collect()) == ["v1", "v3", "v5"]
    checkpoint = tmp_path / "b"
    assert values(run_stream(stream(spark, broker.bootstrap, **lenient), checkpoint)) == ["v1", "v3", "v5"]
    produce(broker.bootstrap, topic, ["after"], partition=0)
    assert values(run_stream(stream(spark, broker.bootstrap, **lenient), checkpoint)) == ["after"]


def test_an_end_offset_that_went_back_is_data_loss(spark, broker, tmp_path):
    """The topic is deleted and made again with fewer records: the checkpoint's offsets are past the
    new end. Asked again fetchOffset.numRetries times, then reported."""
    topic = make_topic(broker.bootstrap, "back", records=5)
    checkpoint = tmp_path / "ckpt"
    options = {"subscribe": topic, "startingOffsets": "earliest", "fetchOffset.numRetries": "1"}
    options["fetchOffset.retryIntervalMs"] = "10"
    assert len(run_stream(stream(spark, broker.bootstrap, **options), checkpoint)) == 5
    with SimpleClient(broker.bootstrap) as client:
        client.delete_topic(topic)
        client.create_topic(topic, partitions=1)
    produce(broker.bootstrap, topic, ["r0", "r1"])
    failure = run_stream(stream(spark, broker.bootstrap, **options), checkpoint, fail=True)
    assert f"the end offset of a partition went back: {topic}-0 from 5 to 2" in str(failure)
    lenient = {**options, "failOnDataLoss": "false"}
    assert run_stream(stream(spark, broker.bootstrap, **lenient), checkpoint) == []  # starts again at 2
    produce(broker.bootstrap, topic, ["r2"])
    assert values(run_stream(stream(spark, broker.bootstrap, **lenient), checkpoint)) == ["r2"]


def test_ending_timestamp_bounds_a_batch_read(spark, broker):
    t0 = 1_700_000_000_000
    topic = topic_name("end-ts")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=1)
        client.produce(
            topic, [ProducerRecord(None, f"v{i}".encode(), (), t0 + 1000 * i) for i in range(10)], partition=0
        )
    rows = read(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingTimestamp=str(t0 + 2000),
        endingTimestamp=str(t0 + 5000),
    ).collect()
    assert sorted(r.offset for r in rows) == [2, 3, 4]  # the end is the first record at or after it
    # No record at or after the ending timestamp: the end is the latest offset.
    assert read(spark, broker.bootstrap, subscribe=topic, endingTimestamp=str(t0 + 60_000)).count() == 10


def test_min_offsets_per_trigger_holds_a_batch_back(spark, broker, tmp_path):
    topic = make_topic(broker.bootstrap, "min-offsets")
    name = f"parity_{uuid.uuid4().hex[:8]}"
    df = stream(spark, broker.bootstrap, subscribe=topic, minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    query = (
        df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path)).start()
    )
    try:
        query.processAllAvailable()  # the first trigger (no data yet) starts maxTriggerDelay
        produce(broker.bootstrap, topic, ["a", "b", "c"])
        query.processAllAvailable()
        assert spark.table(name).count() == 0  # 3 < 5 waiting: no batch
        produce(broker.bootstrap, topic, ["d", "e"])
        query.processAllAvailable()
        assert values(spark.table(name).collect()) == ["a", "b", "c", "d", "e"]
    finally:
        query.stop()


def test_max_records_per_partition_splits_a_partitions_range(spark, broker):
    topic = make_topic(broker.bootstrap, "max-records", records=100)
    df = read(spark, broker.bootstrap, subscribe=topic, maxRecordsPerPartition="40")
    assert df.rdd.getNumPartitions() == 3
    assert sorted(r.offset for r in df.collect()) == list(range(100))


def test_kafka_settings_spark_refuses_are_refused(spark, broker):
    for setting, reason in [
        ("auto.offset.reset", "startingOffsets"),
        ("key.deserializer", "keys are read as bytes"),
        ("value.deserializer", "values are read as bytes"),
        ("enable.auto.commit", "commits no offsets"),
        ("interceptor.classes", "interceptors"),
    ]:
        with pytest.raises(Exception, match=reason):
            read(spark, broker.bootstrap, subscribe="t", **{f"kafka.{setting}": "x"})


def test_options_are_checked_when_the_read_is_defined(spark, broker, tmp_path):
    """load() itself refuses, naming the option and what it takes."""
    for options, complaint in [
        ({}, 'exactly one of the options "assign", "subscribe" or "subscribePattern"'),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss='maybe' must be true or false"),
        ({"subscribe": "a", "kafka.bogus.thing": "1"}, "'bogus.thing' is not a Kafka consumer setting"),
        ({"subscribe": "a", "startingOfsets": "earliest"}, r"did you mean startingOffsets\?"),
    ]:
        with pytest.raises(Exception, match=complaint):
            read(spark, broker.bootstrap, **options)
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("onceflow").option("subscribe", "a").load()
    with pytest.raises(Exception, match="failOnDataLoss='maybe'"):
        stream(spark, broker.bootstrap, subscribe="a", failOnDataLoss="maybe")  # readStream...load() too
    # Batch-only and stream-only options, as Spark's: refused when the query starts.
    failure = run_stream(
        stream(spark, broker.bootstrap, subscribe="a", endingOffsets="latest"), tmp_path, fail=True
    )
    assert "endingOffsets is for batch reads only" in str(failure)
    with pytest.raises(Exception, match="batch reads start earlier"):
        read(spark, broker.bootstrap, subscribe="a", startingOffsets="latest").collect()


def test_the_schema_is_fixed(spark, broker):
    with pytest.raises(Exception, match="has a fixed schema"):
        spark.read.format("onceflow").schema("value STRING").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).option("subscribe", "a").load().collect()


# -- sink --------------------------------------------------------------------------------------------


def write(df, bootstrap: str, **options) -> None:
    writer = df.write.format("onceflow").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_the_topic_option_overrides_a_topic_column(spark, server):
    chosen, ignored = topic_name("chosen"), topic_name("ignored")
    df = spark.createDataFrame([(ignored, "a"), (ignored, "b")], "topic STRING, value STRING")
    write(df, server.bootstrap, topic=chosen, guarantee="exactly-once")
    assert sorted(r.value for r in consumed(server.bootstrap, chosen)) == [b"a", b"b"]


def test_rows_name_their_topics_without_the_topic_option(spark, server):
    one, two = make_topic(server.bootstrap, "rows-1"), make_topic(server.bootstrap, "rows-2")
    df = spark.createDataFrame([(one, "a"), (two, "b"), (one, "c")], "topic STRING, value STRING")
    write(df.repartition(1), server.bootstrap, guarantee="exactly-once")
    assert sorted(r.value for r in consumed(server.bootstrap, one)) == [b"a", b"c"]
    assert [r.value for r in consumed(server.bootstrap, two)] == [b"b"]


def test_key_partition_and_headers_columns(spark, server):
    topic = make_topic(server.bootstrap, "columns", partitions=3)
    df = spark.createDataFrame(
        [("k", "placed", 2, [("h", b"1")], "x"), (None, "no key", None, None, "y")],
        "key STRING, value STRING, partition INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, note STRING",
    )
    # includeHeaders is accepted (a headers column is written when there is one); other columns are ignored.
    write(df, server.bootstrap, topic=topic, guarantee="exactly-once", includeHeaders="true")
    by_value = {r.value: r for r in consumed(server.bootstrap, topic)}
    placed = by_value[b"placed"]
    assert (placed.key, placed.partition, placed.headers) == (b"k", 2, [("h", b"1")])
    assert by_value[b"no key"].key is None  # no key: a null key; no partition: the partitioner's


def test_batch_writes_append_and_refuse_overwrite(spark, server):
    topic = make_topic(server.bootstrap, "batch-write", partitions=2)
    df = spark.createDataFrame([(f"r{i}",) for i in range(10)], "value STRING").repartition(2)
    write(df, server.bootstrap, topic=topic, guarantee="exactly-once")
    write(df, server.bootstrap, topic=topic, guarantee="at-least-once")  # a second save appends
    assert sorted(r.value for r in consumed(server.bootstrap, topic)) == sorted(
        2 * [f"r{i}".encode() for i in range(10)]
    )
    with pytest.raises(Exception, match="cannot be overwritten"):
        df.write.format("onceflow").mode("overwrite").option(
            "kafka.bootstrap.servers", server.bootstrap
        ).option("topic", topic).save()


def test_sink_columns_and_options_are_checked_when_the_write_starts(spark, broker):
    df = spark.createDataFrame([("a", 1)], "value STRING, n BIGINT")
    for frame, options, complaint in [
        (df.select("n"), {"topic": "t"}, 'needs a "value" column'),
        (df.select(F.col("n").alias("value")), {"topic": "t"}, '"value" column is bigint'),
        (df, {}, 'set the option "topic", or give the rows a "topic" column'),
        (df, {"topic": "t", "kafka.value.serializer": "x"}, "values are written as bytes"),
        (df, {"topic": "t", "kafka.lingr.ms": "5"}, r"did you mean kafka.linger.ms\?"),
        (df, {"topic": "t", "kafka.linger.ms": "soon"}, "linger.ms='soon' is not an integer"),
    ]:
        with pytest.raises(Exception, match=complaint):
            write(frame, broker.bootstrap, **options)
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        df.write.format("onceflow").mode("append").option("topic", "t").save()


def test_a_row_with_a_null_topic_fails_the_write(spark, broker):
    df = spark.createDataFrame([(None, "a")], "topic STRING, value STRING")
    with pytest.raises(Exception, match="null topic"):
        write(df, broker.bootstrap)


def test_complete_output_mode_writes_the_whole_result(spark, broker, tmp_path):
    """Complete mode (PySpark calls the writer with overwrite=True): each batch writes every group's
    count, as Spark's Kafka sink does. (Update mode is refused by PySpark for Python data sources.)"""
    source = make_topic(broker.bootstrap, "modes-in", records=6)
    counts = (
        stream(spark, broker.bootstrap, subscribe=source, startingOffsets="earliest")
        .groupBy("key")
        .count()
        .select(F.col("key"), F.col("count").cast("string").alias("value"))
    )
    out = make_topic(broker.bootstrap, "modes-complete")
    query = (
        counts.writeStream.format("onceflow")
        .outputMode("complete")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", out)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert sorted((r.key, r.value) for r in consumed(broker.bootstrap, out)) == [
        (b"k0", b"2"),
        (b"k1", b"2"),
        (b"k2", b"2"),
    ]
