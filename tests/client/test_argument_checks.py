"""Mistakes in calls and configs are named as the user wrote them: an argument of the wrong type
(it failed deep in the wire encoder with ``struct.error: required argument is not an integer``), a
config key that is not Kafka's (``ConsumerConfig.__init__() got an unexpected keyword argument``),
and the group a subscription needs (``subscribe() needs group_id``)."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import topic_name

from onceflow.client import AdminClient, AsyncClient, Consumer, Producer, ProducerConfig, SimpleClient
from onceflow.client.consumer import ConsumerConfig
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import InvalidConfig, KafkaError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partitions": "3"}, "partitions must be an int, not str '3'"),
        ({"replication_factor": 1.0}, "replication_factor must be an int, not float"),
        ({"configs": {"retention.ms": [1]}}, r"configs\['retention.ms'\] must be a str"),
    ],
)
def test_create_topic_names_the_argument_of_the_wrong_type(kwargs, message):
    client = AsyncClient("127.0.0.1:1")  # refused before any connection is made

    async def create():
        try:
            await client.create_topic("t", **kwargs)
        finally:
            await client.close()

    with pytest.raises(TypeError, match=message):
        asyncio.run(create())


def test_calls_with_wrong_types_against_a_broker(broker):
    topic = topic_name("types")
    with AdminClient(broker.bootstrap) as admin:
        with pytest.raises(TypeError, match="name must be a str, not int 123"):
            admin.create_topic(123)
        admin.create_topic(topic, partitions=2, configs={"retention.ms": 3_600_000})  # numbers: Kafka's text
        assert admin.describe_configs(topic)["retention.ms"] == "3600000"
        with pytest.raises(TypeError, match="total must be an int"):
            admin.create_partitions(topic, "4")
        with pytest.raises(TypeError, match=f"the offset for {topic}-0 must be an int"):
            admin.delete_records({TopicPartition(topic, 0): "1"})
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for kwargs, message in [
            ({"partition": "0"}, "partition must be an int, not str '0'"),
            ({"timestamp_ms": "1"}, "timestamp_ms must be an int"),
            ({"headers": {"h": b"x"}}, "headers must be a list of"),
            ({"headers": [("h", "x")]}, "the value of header 'h' must be bytes or None"),
        ]:
            with pytest.raises(TypeError, match=message):
                producer.send(topic, b"v", **kwargs)
        with pytest.raises(TypeError, match="topic must be a str, not int 5"):
            producer.send(5, b"v")
        assert producer.send(topic, b"v", partition=1).result(30).partition == 1  # the producer goes on
    with SimpleClient(broker.bootstrap) as client, pytest.raises(TypeError, match="partition must be an int"):
        client.produce(topic, [(None, b"v")], partition="1")
    with Consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with pytest.raises(TypeError, match="partition must be an int, not str '0'"):
            consumer.assign([(topic, "0")])
        consumer.assign([(topic, 0)])
        with pytest.raises(TypeError, match="offset must be an int"):
            consumer.seek(TopicPartition(topic, 0), "1")
        with pytest.raises(TypeError, match="timeout_ms must be a number"):
            consumer.poll("100")


def test_config_keys_are_named_as_kafka_spells_them():
    with pytest.raises(
        InvalidConfig, match=r"unknown consumer config 'group.idd' \(did you mean 'group.id'\?\)"
    ):
        ConsumerConfig.from_settings({"group.idd": "g"})
    with pytest.raises(InvalidConfig, match="unknown consumer config 'group.idd'"):
        ConsumerConfig.from_settings({}, {"group_idd": "g"})  # a keyword argument: the same name
    with pytest.raises(
        InvalidConfig, match=r"unknown producer setting 'lingr.ms' \(did you mean 'linger.ms'\?\)"
    ):
        ProducerConfig.from_mapping({"lingr.ms": 5})
    with pytest.raises(InvalidConfig, match="max.poll.records='many' is not an integer"):
        ConsumerConfig.from_settings({"max.poll.records": "many"})
    assert (
        ConsumerConfig.from_settings(
            {"max.poll.records": "7", "enable.auto.commit": "false"}
        ).max_poll_records
        == 7
    )
    with pytest.raises(InvalidConfig, match="client.id must be a string"):
        ProducerConfig.from_mapping({"client.id": 5})


def test_the_consumer_names_kafkas_key(broker):
    with pytest.raises(InvalidConfig, match="unknown consumer config 'group.idd'"):
        Consumer(config={"bootstrap.servers": broker.bootstrap, "group.idd": "g"})
    with pytest.raises(InvalidConfig, match="unknown consumer config 'group.idd'"):
        Consumer(bootstrap_servers=broker.bootstrap, group_idd="g")
    with pytest.raises(KafkaError, match="subscribe\\(\\) needs a consumer group: set group.id"):
        Consumer("t", bootstrap_servers=broker.bootstrap)
