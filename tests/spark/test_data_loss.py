"""failOnDataLoss: a source range whose records were deleted (DeleteRecords here; retention does the
same) before a task read them fails with a message naming the offsets and the option, or, with
failOnDataLoss=false, is read from the new log start. Runs the source's reader without a JVM."""

from __future__ import annotations

import uuid

import pytest

from onceflow.client.admin import AdminClient
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.spark.cluster import BlockingCluster
from onceflow.spark.offsets import OffsetRange
from onceflow.spark.options import parse_source_options
from onceflow.spark.range_reader import DataLoss, read_range

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture
def trimmed_topic(broker):
    """A topic with offsets 0-9 of which 0-5 were deleted."""
    topic = f"loss-{uuid.uuid4().hex[:8]}"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=1)
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce(topic, b"v%d" % i, partition=0)
        producer.flush(30)
        assert admin.delete_records({TopicPartition(topic, 0): 6}) == {TopicPartition(topic, 0): 6}
    return topic


def _offsets(batches) -> list[int]:
    return [offset for batch in batches for offset in batch.column("offset").to_pylist()]


def test_lost_records_fail_the_read_by_default(broker, trimmed_topic):
    with BlockingCluster(broker.bootstrap) as cluster, pytest.raises(DataLoss) as lost:
        list(read_range(cluster, OffsetRange(trimmed_topic, 0, 2, 10), isolation_level=1))
    message = str(lost.value)
    assert "offsets 2..5 were deleted" in message and "failOnDataLoss" in message
    assert lost.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_without_fail_on_data_loss_the_read_goes_on_from_the_log_start(broker, trimmed_topic):
    with BlockingCluster(broker.bootstrap) as cluster:
        kept = list(
            read_range(
                cluster, OffsetRange(trimmed_topic, 0, 2, 10), isolation_level=1, fail_on_data_loss=False
            )
        )
        assert _offsets(kept) == [6, 7, 8, 9]
        gone = read_range(
            cluster, OffsetRange(trimmed_topic, 0, 0, 4), isolation_level=1, fail_on_data_loss=False
        )
        assert list(gone) == []  # wholly deleted: nothing, and no error


def test_an_offset_beyond_the_log_end_still_fails_either_way(broker, trimmed_topic):
    with BlockingCluster(broker.bootstrap) as cluster, pytest.raises(KafkaError) as refused:
        list(
            read_range(
                cluster, OffsetRange(trimmed_topic, 0, 12, 20), isolation_level=1, fail_on_data_loss=False
            )
        )
    assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and not isinstance(refused.value, DataLoss)


@pytest.mark.parametrize("option,expected", [(None, None), ("false", [6, 7, 8, 9])])
def test_the_source_option_reaches_the_reader(broker, trimmed_topic, option, expected):
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource import InputPartition

    from onceflow.spark.source import OnceflowBatchReader

    settings = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": trimmed_topic}
    if option is not None:
        settings["failOnDataLoss"] = option
    reader = OnceflowBatchReader(parse_source_options(settings, streaming=False))
    rows = reader.read(InputPartition(OffsetRange(trimmed_topic, 0, 3, 10)))
    if expected is None:
        with pytest.raises(DataLoss):
            list(rows)
    else:
        assert _offsets(rows) == expected


def test_planned_records_that_never_come_fail_after_the_poll_timeout(broker, trimmed_topic):
    """kafkaConsumer.pollTimeoutMs: offsets 10..14 are planned but the log ends at 10."""
    with BlockingCluster(broker.bootstrap) as cluster, pytest.raises(KafkaError) as waited:
        list(
            read_range(cluster, OffsetRange(trimmed_topic, 0, 8, 15), isolation_level=1, poll_timeout_ms=300)
        )
    assert "returned nothing there for 300 ms" in str(waited.value)
    assert "kafkaConsumer.pollTimeoutMs" in str(waited.value)


def stream_reader(broker, topic: str, **options: str):
    pytest.importorskip("pyspark")
    from onceflow.spark.source import OnceflowStreamReader

    settings = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **options}
    settings.update({"fetchOffset.numRetries": "1", "fetchOffset.retryIntervalMs": "10"})
    return OnceflowStreamReader(parse_source_options(settings, streaming=True))


def test_a_partition_that_is_gone_is_data_loss(broker, trimmed_topic):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    start = {trimmed_topic: {"0": 10, "7": 3}}  # partition 7 is no more
    reader = stream_reader(broker, trimmed_topic)
    try:
        with pytest.raises(DataLoss, match=f"partitions {trimmed_topic}-7 are gone.*failOnDataLoss"):
            reader.latestOffset(start, ReadAllAvailable())
    finally:
        reader.stop()
    lenient = stream_reader(broker, trimmed_topic, failOnDataLoss="false")
    try:
        assert lenient.latestOffset(start, ReadAllAvailable()) == {trimmed_topic: {"0": 10}}
    finally:
        lenient.stop()


def test_a_new_partition_that_does_not_start_at_0_is_data_loss(broker, trimmed_topic):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with AdminClient(broker.bootstrap) as admin:
        admin.create_partitions(trimmed_topic, 2)
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(4):
            producer.produce(trimmed_topic, b"n%d" % i, partition=1)
        producer.flush(30)
        admin.delete_records({TopicPartition(trimmed_topic, 1): 2})
    start = {trimmed_topic: {"0": 10}}
    reader = stream_reader(broker, trimmed_topic)
    try:
        with pytest.raises(
            DataLoss, match=f"new partitions do not start at offset 0: {trimmed_topic}-1 starts at 2"
        ):
            reader.latestOffset(start, ReadAllAvailable())
    finally:
        reader.stop()
