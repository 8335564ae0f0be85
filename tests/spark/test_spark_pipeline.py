"""The onceflow source and sink inside a real Spark session, against a real onceflow broker.

One broker and one SparkSession for the whole module (a session costs 5-14 s to start).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from tests.conftest import topic_name  # noqa: E402
from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.spark.txn_helpers import write_transactions  # noqa: E402

from onceflow.client import SimpleClient  # noqa: E402
from onceflow.protocol.record_codec import ProducerRecord  # noqa: E402
from onceflow.spark.pipeline import PipelineConfig, run_pipeline  # noqa: E402

pytestmark = pytest.mark.spark

KAFKA_SCHEMA = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
    ("headers", "array<struct<key:string,value:binary>>"),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("spark-broker"))
    proc.start()
    yield proc
    proc.stop()


def make_input(bootstrap: str, prefix: str, partitions: int, count: int, start: int = 0) -> str:
    topic = topic_name(prefix)
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=partitions)
        produce(client, topic, count, start)
    return topic


def produce(client: SimpleClient, topic: str, count: int, start: int = 0) -> None:
    client.produce(
        topic,
        [
            (f"k{i % 7}".encode(), f"v{i}".encode(), [("h", str(i).encode())])
            for i in range(start, start + count)
        ],
    )


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed"):
    with SimpleClient(bootstrap) as client:
        return list(client.consume(topic, isolation_level=isolation, timeout_s=1.5))


def read_source(spark, bootstrap: str, topic: str, **options):
    reader = (
        spark.read.format("onceflow").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_returns_exactly_the_records_with_kafkas_schema(spark, broker):
    topic = make_input(broker.bootstrap, "batch", partitions=3, count=1200)
    df = read_source(spark, broker.bootstrap, topic, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == KAFKA_SCHEMA
    # Without includeHeaders (Spark's default) there is no headers column.
    assert read_source(spark, broker.bootstrap, topic).columns == [name for name, _ in KAFKA_SCHEMA[:-1]]
    rows = df.collect()
    expected = consume_all(broker.bootstrap, topic)
    assert len(expected) == 1200
    assert sorted((r.partition, r.offset, r.key, r.value) for r in rows) == sorted(
        (c.partition, c.offset, c.key, c.value) for c in expected
    )
    one = next(r for r in rows if r.value == b"v5")
    assert one.topic == topic and one.timestampType == 0
    assert [(h.key, h.value) for h in one.headers] == [("h", b"5")]
    # endingOffsets as JSON bounds the read per partition.
    bounded = read_source(
        spark, broker.bootstrap, topic, endingOffsets=f'{{"{topic}": {{"0": 10, "1": 0, "2": 3}}}}'
    )
    assert sorted((r.partition, r.offset) for r in bounded.collect()) == [(0, i) for i in range(10)] + [
        (2, i) for i in range(3)
    ]
    # Nothing to read (an empty topic): no rows, where PySpark's read(None) used to fail the job.
    empty = topic_name("empty")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(empty, partitions=2)
    assert read_source(spark, broker.bootstrap, empty).count() == 0


def run_available_now(
    spark, broker, topic: str, checkpoint: Path, output: Path, max_offsets: int | None, **options: str
):
    reader = (
        spark.readStream.format("onceflow")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    return batches, spark.read.parquet(str(output)).collect()


def test_stream_admission_control_and_resume_from_checkpoint(spark, broker, tmp_path):
    topic = make_input(broker.bootstrap, "stream", partitions=2, count=500)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    batches, rows = run_available_now(spark, broker, topic, checkpoint, output, max_offsets=150)
    assert sum(batches) == 500
    assert max(batches) <= 150 and len(batches) >= 4
    assert sorted(r.value for r in rows) == sorted(f"v{i}" for i in range(500))

    with SimpleClient(broker.bootstrap) as client:
        produce(client, topic, 120, start=500)
    batches, rows = run_available_now(spark, broker, topic, checkpoint, output, max_offsets=None)
    # Only the new records: the offsets of the first run came back from the checkpoint.
    assert sum(batches) == 120
    assert sorted(r.value for r in rows) == sorted(f"v{i}" for i in range(620))


T0 = 1_700_000_000_000


def make_timed_input(bootstrap: str, prefix: str, count: int) -> str:
    """``count`` records in partition 0, record i stamped T0 + i seconds (partition 1 stays empty)."""
    topic = topic_name(prefix)
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=2)
        records = [ProducerRecord(b"k", f"v{i}".encode(), (), T0 + 1000 * i) for i in range(count)]
        client.produce(topic, records, partition=0)
    return topic


def test_batch_read_by_timestamps_and_min_partitions(spark, broker):
    topic = make_timed_input(broker.bootstrap, "timed", 100)
    df = read_source(
        spark,
        broker.bootstrap,
        topic,
        startingTimestamp=str(T0 + 40_000),
        endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 70_000}, "1": {T0}}}}}',
        startingOffsetsByTimestampStrategy="latest",  # partition 1 has no record after T0 + 40 s
        minPartitions="4",
    )
    assert df.rdd.getNumPartitions() == 4  # offsets 40-69 of partition 0, cut in four
    rows = df.collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, i) for i in range(40, 70)]
    assert min(r.timestamp for r in rows).timestamp() * 1000 == T0 + 40_000
    # Without the strategy, a partition with nothing at or after the timestamp fails the read, by name.
    strict = read_source(spark, broker.bootstrap, topic, startingTimestamp=str(T0 + 40_000))
    with pytest.raises(Exception, match=f"{topic}-1 has no record at or after timestamp"):
        strict.collect()


def test_stream_starts_at_a_timestamp(spark, broker, tmp_path):
    topic = make_timed_input(broker.bootstrap, "timed-stream", 50)
    batches, rows = run_available_now(
        spark,
        broker,
        topic,
        tmp_path / "checkpoint",
        tmp_path / "output",
        None,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 45_000}, "1": {T0}}}}}',
        startingOffsetsByTimestampStrategy="latest",
        minPartitions="2",
    )
    assert sum(batches) == 5
    assert sorted(r.value for r in rows) == [f"v{i}" for i in range(45, 50)]


def pipeline_config(broker, topic: str, output: str, checkpoint: Path, guarantee: str) -> PipelineConfig:
    return PipelineConfig(
        app="tests.spark.apps:upper_values",
        input=topic,
        output=output,
        checkpoint=str(checkpoint),
        bootstrap=broker.bootstrap,
        available_now=True,
        guarantee=guarantee,
        max_offsets_per_trigger=200,
    )


def replay_last_batch(spark, config: PipelineConfig) -> None:
    """What a driver killed after the sink wrote batch N, before Spark's commit log got N, leaves
    behind: offsets/N without commits/N. The next run replays batch N with the same offsets."""
    commits = sorted(
        (Path(config.checkpoint) / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    crc = last.parent / f".{last.name}.crc"
    if crc.exists():
        crc.unlink()
    run_pipeline(config, spark)


def test_pipeline_at_least_once_end_to_end_and_its_replay_duplicates(spark, broker, tmp_path):
    topic = make_input(broker.bootstrap, "alo-in", partitions=2, count=700)
    output = topic_name("alo-out")
    config = pipeline_config(broker, topic, output, tmp_path / "ckpt", "at-least-once")
    progress = run_pipeline(config, spark)
    assert sum(p["numInputRows"] for p in progress) == 700
    out = consume_all(broker.bootstrap, output)
    assert sorted(r.value for r in out) == sorted(f"V{i}".encode() for i in range(700))
    assert {r.key for r in out} == {f"k{i}".encode() for i in range(7)}

    # The baseline the exactly-once sink exists for: a replayed batch is written twice.
    replay_last_batch(spark, config)
    again = consume_all(broker.bootstrap, output)
    assert len(again) > 700
    assert len({r.value for r in again}) == 700


def test_pipeline_exactly_once_replay_writes_nothing_twice(spark, broker, tmp_path):
    topic = make_input(broker.bootstrap, "eos-in", partitions=2, count=700)
    output = topic_name("eos-out")
    config = pipeline_config(broker, topic, output, tmp_path / "ckpt", "exactly-once")
    run_pipeline(config, spark)
    first = consume_all(broker.bootstrap, output)
    replay_last_batch(spark, config)
    again = consume_all(broker.bootstrap, output)
    assert sorted(r.value for r in first) == sorted(f"V{i}".encode() for i in range(700))
    assert [(r.partition, r.offset, r.value) for r in again] == [
        (r.partition, r.offset, r.value) for r in first
    ]


def test_source_reads_only_committed_records(spark, broker):
    topic = topic_name("txn")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=1)
    write_transactions(
        broker.bootstrap,
        topic,
        [([b"c1", b"c2"], True), ([b"a1", b"a2", b"a3"], False), ([b"c3"], True)],
    )
    committed = [r.value for r in read_source(spark, broker.bootstrap, topic).orderBy("offset").collect()]
    assert committed == [b"c1", b"c2", b"c3"]
    everything = read_source(spark, broker.bootstrap, topic, **{"isolation.level": "read_uncommitted"})
    assert sorted(r.value for r in everything.collect()) == [b"a1", b"a2", b"a3", b"c1", b"c2", b"c3"]


def test_cli_pipeline_group_is_importable():
    from onceflow.cli.pipeline import pipeline

    assert "run" in pipeline.commands
    assert shutil.which("java") is not None
