"""DeleteRecords (21): confluent-kafka's, kafka-python's, aiokafka's and our own ``delete_records``
against the broker; what consumers see afterwards (earliest offset, fetches below the start), Kafka's
per-partition errors, and the new start surviving a restart."""

from __future__ import annotations

import asyncio
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RECORDS = 10


def _topic(bootstrap: str, partitions: int = 1) -> str:
    """A topic whose partitions each hold offsets 0-9, written as five batches of two."""
    name = f"del-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(partitions):
        for i in range(0, RECORDS, 2):
            for j in (i, i + 1):
                producer.produce(name, b"v%d" % j, partition=partition)
            producer.flush(30)
    return name


def _watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """Everything a consumer assigned at offset 0 reads: below the start it gets OFFSET_OUT_OF_RANGE
    and auto.offset.reset=earliest moves it to the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        low, high = _watermarks(bootstrap, topic)
        got: list[tuple[int, bytes]] = []
        for _ in range(100):
            if got and got[-1][0] == high - 1:
                break
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is None:
                    got.append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def _confluent_delete(bootstrap: str, topic: str, offset: int, partition: int = 0):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition, offset)
    return admin.delete_records([tp], operation_timeout=10)[tp].result(30)


def test_confluent_delete_records_moves_the_start_and_it_survives_a_restart(broker):
    topic = _topic(broker.bootstrap)
    deleted = _confluent_delete(broker.bootstrap, topic, 5)
    assert deleted.low_watermark == 5
    assert _watermarks(broker.bootstrap, topic) == (5, RECORDS)
    # offset 4 and 5 share a batch; the consumer skips 4 itself
    assert _read_all(broker.bootstrap, topic) == [(i, b"v%d" % i) for i in range(5, RECORDS)]
    broker.restart()
    assert _watermarks(broker.bootstrap, topic) == (5, RECORDS)
    assert _read_all(broker.bootstrap, topic)[0] == (5, b"v5")
    # a lower offset later changes nothing and answers the start as it is
    assert _confluent_delete(broker.bootstrap, topic, 2).low_watermark == 5


def test_confluent_offset_end_deletes_everything_and_producing_goes_on(broker):
    topic = _topic(broker.bootstrap)
    assert _confluent_delete(broker.bootstrap, topic, ck.OFFSET_END).low_watermark == RECORDS
    assert _watermarks(broker.bootstrap, topic) == (RECORDS, RECORDS)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"after", partition=0)
    producer.flush(30)
    assert _read_all(broker.bootstrap, topic) == [(RECORDS, b"after")]


@pytest.mark.parametrize(
    "where,offset,code",
    [
        ("topic", RECORDS + 1, "OFFSET_OUT_OF_RANGE"),
        ("topic", -5, "OFFSET_OUT_OF_RANGE"),
        ("__consumer_offsets", 0, "TOPIC_EXCEPTION"),
        ("no-such-topic", 0, "UNKNOWN_TOPIC_OR_PART"),
    ],
    ids=["beyond-high-watermark", "negative", "internal-topic", "unknown-topic"],
)
def test_confluent_errors(broker, where, offset, code):
    topic = _topic(broker.bootstrap)
    # __consumer_offsets exists once a group has committed; make sure it does
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "make-offsets-topic"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    target = topic if where == "topic" else where
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(target, 0, offset)
    if offset < -1 or where == "no-such-topic":
        # librdkafka refuses these itself (a negative offset other than OFFSET_END; a partition without
        # a leader in its metadata): ask the broker on the wire
        from kafka.protocol.admin import DeleteRecordsRequest as R
        from tests.helpers.wire import WireClient

        request = R(
            topics=[
                R.DeleteRecordsTopic(
                    name=target,
                    partitions=[
                        R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=offset)
                    ],
                )
            ],
            timeout_ms=1000,
        )
        with WireClient(broker.bootstrap) as client:
            answer = client.request(request, 2).topics[0].partitions[0]
        assert (answer.error_code, answer.low_watermark) == (getattr(ck.KafkaError, code), -1)
    else:
        with pytest.raises(ck.KafkaException) as refused:
            admin.delete_records([tp], operation_timeout=10)[tp].result(30)
        assert refused.value.args[0].code() == getattr(ck.KafkaError, code)
    assert _watermarks(broker.bootstrap, topic) == (0, RECORDS)


def test_kafka_python_delete_records(broker):
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KpTopicPartition

    topic = _topic(broker.bootstrap, partitions=2)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = kp.delete_records({KpTopicPartition(topic, 0): 3, KpTopicPartition(topic, 1): 8})
    finally:
        kp.close()
    assert {tp.partition: r["low_watermark"] for tp, r in result.items()} == {0: 3, 1: 8}
    assert _watermarks(broker.bootstrap, topic, 0) == (3, RECORDS)
    assert _watermarks(broker.bootstrap, topic, 1) == (8, RECORDS)


def test_aiokafka_delete_records(broker):
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = _topic(broker.bootstrap)

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.delete_records({AioTopicPartition(topic, 0): RecordsToDelete(before_offset=7)})
        finally:
            await admin.close()

    assert list(asyncio.run(run()).values()) == [7]
    assert _watermarks(broker.bootstrap, topic) == (7, RECORDS)


def test_our_admin_client_delete_records(broker):
    from onceflow.client.admin import AdminClient as OurAdmin
    from onceflow.client.consumer.structs import TopicPartition as OurTopicPartition
    from onceflow.protocol.errors import ErrorCode, KafkaError

    topic = _topic(broker.bootstrap)
    tp = OurTopicPartition(topic, 0)
    with OurAdmin(broker.bootstrap) as admin:
        assert admin.delete_records({tp: 4}) == {tp: 4}
        assert admin.delete_records({tp: -1}) == {tp: RECORDS}  # -1: the high watermark
        with pytest.raises(KafkaError) as refused:
            admin.delete_records({tp: RECORDS + 5})
        assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _watermarks(broker.bootstrap, topic) == (RECORDS, RECORDS)


def test_max_timestamp_lookup_ignores_records_below_a_start_inside_a_batch(tmp_path):
    from tests.log.batches import make_batch, produce

    from onceflow.broker.handlers.list_offsets import MAX_TIMESTAMP, _lookup
    from onceflow.log.config import LogConfig
    from onceflow.log.log import Log

    log = Log.open(tmp_path / "t-0", LogConfig())
    produce(log, make_batch(3, timestamp=5_000, step_ms=-1_000))  # offsets 0-2: 5000, 4000, 3000
    produce(log, make_batch(2, timestamp=3_500, step_ms=100))  # offsets 3-4: 3500, 3600
    assert _lookup(log, MAX_TIMESTAMP, read_committed=False) == (0, 5_000)
    log.delete_records_before(1)
    assert _lookup(log, MAX_TIMESTAMP, read_committed=False) == (1, 4_000)
    log.delete_records_before(2)
    assert _lookup(log, MAX_TIMESTAMP, read_committed=False) == (4, 3_600)
    log.close()
