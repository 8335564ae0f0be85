"""DescribeLogDirs (35): kafka-python's describe_log_dirs and raw requests see the data dir, every
partition's log size (growing as records arrive, shrinking after DeleteRecords) and the volume's
space; partitions the broker does not have are left out."""

from __future__ import annotations

import os
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _topic(bootstrap: str, partitions: int = 2, configs: dict[str, str] | None = None) -> str:
    name = f"dirs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for _ in range(count):
        producer.produce(topic, b"x" * 100, partition=partition)
        producer.flush(30)  # one batch per record: several batches, so DeleteRecords can drop some


def _sizes(log_dir: dict, topic: str) -> dict[int, int]:
    return {
        p["partition_index"]: p["partition_size"]
        for t in log_dir["topics"]
        if t["name"] == topic
        for p in t["partitions"]
    }


def test_kafka_python_describe_log_dirs(broker):
    from kafka import KafkaAdminClient

    topic = _topic(broker.bootstrap)
    _produce(broker.bootstrap, topic, 1, 5)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (everything,) = admin.describe_log_dirs()
        (one,) = admin.describe_log_dirs({topic: [1, 7]})  # 7 does not exist: left out
    finally:
        admin.close()
    (log_dir,) = everything["log_dirs"]
    assert log_dir["error_code"] == 0
    assert os.path.samefile(log_dir["log_dir"], broker.data_dir)
    sizes = _sizes(log_dir, topic)
    assert sizes[0] == 0 and sizes[1] > 5 * 100
    (only,) = one["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only["topics"]] == [
        (topic, [1])
    ]
    assert only["topics"][0]["partitions"][0]["offset_lag"] == 0


@pytest.mark.parametrize("version", [0, 4])
def test_wire_sizes_follow_produce_and_delete_records(broker, version):
    from kafka.protocol.admin import DescribeLogDirsRequest as R
    from tests.helpers.wire import WireClient

    from onceflow.client.admin import AdminClient as OurAdmin
    from onceflow.client.consumer.structs import TopicPartition

    # ~170-byte batches and 400-byte segments: two batches a segment
    topic = _topic(broker.bootstrap, partitions=1, configs={"segment.bytes": "400"})

    def describe():
        request = R(topics=[R.DescribableLogDirTopic(topic=topic, partitions=[0])])
        with WireClient(broker.bootstrap) as client:
            (result,) = client.request(request, version).results
        return result

    empty = describe()
    _produce(broker.bootstrap, topic, 0, 4)
    full = describe()
    grown = full.topics[0].partitions[0].partition_size
    assert empty.topics[0].partitions[0].partition_size == 0 and grown > 4 * 100
    with OurAdmin(broker.bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, 0): 4})
    # offsets 0-3 filled the first two segments, which go; the rest stays
    trimmed = describe().topics[0].partitions[0].partition_size
    assert 0 < trimmed < grown
    if version >= 4:
        assert full.total_bytes > full.usable_bytes > 0
    no_topic = R(topics=[R.DescribableLogDirTopic(topic="no-such-topic", partitions=[0])])
    with WireClient(broker.bootstrap) as client:
        (result,) = client.request(no_topic, version).results
    assert (result.error_code, result.topics) == (0, [])
