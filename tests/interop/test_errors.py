"""The broker answers bad produce targets with Kafka's error codes.

Clients check partition counts and (kafka-python) topic names before sending, so these tests speak
the wire protocol directly to see the broker's own answer, at several Produce versions real
clients use. One client-level check follows: librdkafka surfaces the broker's INVALID_TOPIC.
"""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from tests.helpers.clients import create_topic
from tests.helpers.wire import WireClient, build_batch

pytestmark = [pytest.mark.interop, pytest.mark.onceflow_only]  # Tansu accepts both (checked)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
PRODUCE_VERSIONS = (3, 7, 9)  # librdkafka 2.x, aiokafka, kafka-python
BAD_TOPIC_NAMES = ("bad topic!", "a/b", "..", "x" * 250)


def _produce(topic: str, partition: int) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=build_batch([(b"k", b"v")])
                    )
                ],
            )
        ],
    )


def _partition_error(response) -> int:
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition.error_code


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_to_missing_partition_of_existing_topic(broker, version, unique_topic):
    create_topic(broker.bootstrap, unique_topic, partitions=2)
    with WireClient(broker.bootstrap) as conn:
        assert (
            _partition_error(conn.request(_produce(unique_topic, 2), version)) == UNKNOWN_TOPIC_OR_PARTITION
        )
        # and the partitions that exist still take records on the same connection
        assert _partition_error(conn.request(_produce(unique_topic, 1), version)) == 0


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_to_negative_partition(broker, version, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    with WireClient(broker.bootstrap) as conn:
        assert (
            _partition_error(conn.request(_produce(unique_topic, -1), version)) == UNKNOWN_TOPIC_OR_PARTITION
        )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("name", BAD_TOPIC_NAMES, ids=("space", "slash", "dotdot", "too-long"))
def test_produce_to_invalid_topic_name(broker, version, name):
    """As in Kafka, Produce never creates topics, so an invalid name is simply not there (the name
    itself is judged where topics get created: Metadata auto-creation and CreateTopics, below)."""
    with WireClient(broker.bootstrap) as conn:
        assert _partition_error(conn.request(_produce(name, 0), version)) == UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("name", BAD_TOPIC_NAMES, ids=("space", "slash", "dotdot", "too-long"))
def test_create_topic_with_invalid_name(broker, name):
    from confluent_kafka import KafkaException
    from tests.helpers.clients import create_topic as create

    with pytest.raises(KafkaException) as refused:
        create(broker.bootstrap, name)
    assert refused.value.args[0].code() == INVALID_TOPIC_EXCEPTION


def test_metadata_for_invalid_topic_name_does_not_create_it(broker):
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="bad topic!")], allow_auto_topic_creation=True
    )
    with WireClient(broker.bootstrap) as conn:
        (topic,) = conn.request(request, 9).topics
        assert topic.error_code == INVALID_TOPIC_EXCEPTION
        everything = conn.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    assert "bad topic!" not in {t.name for t in everything.topics}


def test_librdkafka_reports_invalid_topic(broker):
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
    producer.produce("bad topic!", b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1
    assert errors[0] is not None
    assert errors[0].code() in (KafkaError.TOPIC_EXCEPTION, KafkaError._UNKNOWN_TOPIC)
