"""The broker's defaults of topic configs (Kafka's log.retention.ms, message.max.bytes, ...): applied to
every topic that does not set its own, described as STATIC_BROKER_CONFIG with the broker config's name,
and given on the command line with Kafka's names (log.retention.hours too). message.max.bytes used to be
accepted and then ignored."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import pytest
from kafka.protocol.admin import DescribeConfigsRequest

from onceflow.broker.config import TOPIC_CONFIG_DEFAULTS_FROM, BrokerConfig
from onceflow.cli.serve import broker_config
from onceflow.log.config import TOPIC_CONFIG_DEFAULTS
from onceflow.protocol.errors import ErrorCode

from .raw_client import RawClient, build_batch, running_broker
from .test_produce_fetch import partition_response, produce_request

# Topic configs Kafka backs with no broker config: a topic sets them or has Kafka's default.
TOPIC_ONLY_CONFIGS = {
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
}


def test_every_topic_config_has_a_broker_default_and_kafkas_value_by_default():
    assert set(TOPIC_CONFIG_DEFAULTS_FROM) | TOPIC_ONLY_CONFIGS == set(TOPIC_CONFIG_DEFAULTS)
    assert BrokerConfig().topic_config_defaults() == TOPIC_CONFIG_DEFAULTS


def test_the_command_line_takes_kafkas_names_and_units(tmp_path):
    config = broker_config(
        "127.0.0.1",
        0,
        tmp_path,
        {},
        {"log.retention.hours": "24", "log.roll.hours": "1", "log.segment.bytes": "1048576"},
    )
    assert (config.log_retention_ms, config.log_roll_ms, config.log_segment_bytes) == (
        86_400_000,
        3_600_000,
        1 << 20,
    )
    # Kafka's order: ms, then minutes, then hours; a negative time keeps records for ever.
    both = broker_config("h", 0, tmp_path, {}, {"log.retention.hours": "24", "log.retention.minutes": "5"})
    assert both.log_retention_ms == 300_000
    assert broker_config("h", 0, tmp_path, {}, {"log.retention.hours": "-1"}).log_retention_ms == -1
    with pytest.raises(click.BadParameter, match="log.cleanup.policy"):
        broker_config("h", 0, tmp_path, {}, {"log.cleanup.policy": "compress"})


def _describe(client: RawClient, topic: str):
    R = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(
        resources=[R(resource_type=2, resource_name=topic, configuration_keys=None)], include_synonyms=True
    )

    async def go():
        response = await client.request(request, 4)
        return {c.name: c for c in response.results[0].configs}

    return go()


def test_topics_use_the_broker_defaults_under_their_own_overrides(tmp_path: Path):
    async def scenario():
        async with running_broker(tmp_path, message_max_bytes=2000, log_retention_ms=3_600_000) as broker:
            broker.topics.create_topic("plain", 1)
            broker.topics.create_topic("own", 1, {"retention.ms": "60000"})
            assert broker.topics.get_partition("plain", 0).log.config.max_message_bytes == 2000
            assert broker.topics.get_partition("own", 0).log.config.retention_ms == 60000
            client = await RawClient.connect(broker.port)
            big = build_batch([b"x" * 3000])
            answer = await client.request(produce_request("plain", {0: big}, acks=-1), 9)
            assert partition_response(answer).error_code == ErrorCode.MESSAGE_TOO_LARGE
            plain = await _describe(client, "plain")
            retention = plain["retention.ms"]
            assert (retention.value, retention.config_source) == ("3600000", 4)
            assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
                ("log.retention.ms", "3600000", 4),
                ("retention.ms", "604800000", 5),
            ]
            assert (plain["segment.bytes"].value, plain["segment.bytes"].config_source) == ("1073741824", 5)
            own = (await _describe(client, "own"))["retention.ms"]
            assert (own.value, own.config_source) == ("60000", 1)
            assert [s.source for s in own.synonyms] == [1, 4, 5]
            await client.close()

    asyncio.run(scenario())


def test_the_broker_describes_its_topic_defaults():
    from onceflow.broker.topic_configs import describe_broker_configs

    described = {c.name: c.value for c in describe_broker_configs(BrokerConfig(log_retention_ms=5000), 9092)}
    assert described["log.retention.ms"] == "5000"
    assert described["log.cleanup.policy"] == "delete" and described["message.max.bytes"] == "1048588"
