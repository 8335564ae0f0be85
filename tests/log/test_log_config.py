"""LogConfig: Kafka names, defaults, validation."""

import pytest

from onceflow.log.config import TOPIC_CONFIG_DEFAULTS, LogConfig
from onceflow.protocol.errors import InvalidConfig


def test_defaults_are_kafkas():
    assert TOPIC_CONFIG_DEFAULTS["segment.bytes"] == "1073741824"
    assert TOPIC_CONFIG_DEFAULTS["retention.ms"] == "604800000"
    assert TOPIC_CONFIG_DEFAULTS["retention.bytes"] == "-1"
    assert TOPIC_CONFIG_DEFAULTS["max.message.bytes"] == "1048588"
    assert TOPIC_CONFIG_DEFAULTS["message.timestamp.type"] == "CreateTime"
    assert TOPIC_CONFIG_DEFAULTS["index.interval.bytes"] == "4096"
    assert LogConfig.from_topic_configs({}) == LogConfig()


def test_every_field_has_a_kafka_name():
    assert len(TOPIC_CONFIG_DEFAULTS) == len(LogConfig.__dataclass_fields__)


def test_from_topic_configs_parses():
    config = LogConfig.from_topic_configs(
        {
            "retention.ms": "-1",
            "segment.bytes": 1024,
            "message.timestamp.type": "LogAppendTime",
            "segment.ms": None,
        }
    )
    assert config.retention_ms == -1 and config.segment_bytes == 1024
    assert config.log_append_time and config.segment_ms == LogConfig().segment_ms
    assert LogConfig.from_topic_configs(config.to_topic_configs()) == config


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("no.such.config", "1"),
        ("retention.ms", "soon"),
        ("retention.ms", "-2"),
        ("segment.bytes", "10"),
        ("segment.bytes", str(2**31)),
        ("message.timestamp.type", "WallClock"),
        ("cleanup.policy", "compress"),
        ("cleanup.policy", "compact,compact"),
        ("cleanup.policy", ""),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("delete.retention.ms", "-1"),
    ],
)
def test_invalid_values_name_the_key(name, value):
    with pytest.raises(InvalidConfig, match=name.replace(".", r"\.")):
        LogConfig.from_topic_configs({name: value})


@pytest.mark.parametrize(
    ("value", "compact", "delete"),
    [
        ("delete", False, True),
        ("compact", True, False),
        ("compact, delete", True, True),
        ("delete,compact", True, True),
    ],
)
def test_cleanup_policy_is_a_list(value, compact, delete):
    config = LogConfig.from_topic_configs({"cleanup.policy": value, "min.cleanable.dirty.ratio": "0.25"})
    assert (config.compact, config.delete) == (compact, delete)
    assert config.min_cleanable_dirty_ratio == 0.25
