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
