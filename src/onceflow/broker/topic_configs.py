"""How topic and broker configs are described to clients (CreateTopics v5+, DescribeConfigs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceflow.broker.config import TOPIC_CONFIG_DEFAULTS_FROM, BrokerConfig

# Kafka's DescribeConfigsResponse.ConfigSource.
SOURCE_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# Kafka's ConfigDef types as DescribeConfigs v3+ reports them.
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 4, 5, 6, 7
TOPIC_CONFIG_TYPES = {
    "segment.bytes": TYPE_INT,
    "segment.ms": TYPE_LONG,
    "retention.ms": TYPE_LONG,
    "retention.bytes": TYPE_LONG,
    "index.interval.bytes": TYPE_INT,
    "segment.index.bytes": TYPE_INT,
    "message.timestamp.type": TYPE_STRING,
    "max.message.bytes": TYPE_INT,
    "cleanup.policy": TYPE_LIST,
    "delete.retention.ms": TYPE_LONG,
    "min.cleanable.dirty.ratio": TYPE_DOUBLE,
    "min.compaction.lag.ms": TYPE_LONG,
    "max.compaction.lag.ms": TYPE_LONG,
    "compression.type": TYPE_STRING,
    "compression.gzip.level": TYPE_INT,
    "compression.lz4.level": TYPE_INT,
    "compression.zstd.level": TYPE_INT,
    "min.insync.replicas": TYPE_INT,
    "message.timestamp.before.max.ms": TYPE_LONG,
    "message.timestamp.after.max.ms": TYPE_LONG,
    "flush.messages": TYPE_LONG,
    "flush.ms": TYPE_LONG,
    "unclean.leader.election.enable": TYPE_BOOLEAN,
    "leader.replication.throttled.replicas": TYPE_LIST,
    "follower.replication.throttled.replicas": TYPE_LIST,
    "remote.storage.enable": TYPE_BOOLEAN,
    "remote.log.copy.disable": TYPE_BOOLEAN,
    "remote.log.delete.on.disable": TYPE_BOOLEAN,
    "local.retention.ms": TYPE_LONG,
    "local.retention.bytes": TYPE_LONG,
    "segment.jitter.ms": TYPE_LONG,
    "preallocate": TYPE_BOOLEAN,
    "file.delete.delay.ms": TYPE_LONG,
    "message.downconversion.enable": TYPE_BOOLEAN,
}


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    config_type: int
    read_only: bool = False
    # (source, value) pairs, most specific first: Kafka's "synonyms"; a third element names a synonym
    # whose config name differs (a broker default: log.retention.ms for retention.ms).
    synonyms: tuple[tuple, ...] = ()


def topic_defaults(config: BrokerConfig | None = None) -> dict[str, str]:
    """Each topic config's value where a topic sets none: the broker's (``config``), else Kafka's."""
    from onceflow.log.config import TOPIC_CONFIG_DEFAULTS

    return config.topic_config_defaults() if config is not None else dict(TOPIC_CONFIG_DEFAULTS)


def describe_topic_configs(
    overrides: Mapping[str, str], config: BrokerConfig | None = None
) -> list[DescribedConfig]:
    """A topic's configs as Kafka describes them: its own overrides (TOPIC_CONFIG), else the broker's
    setting where it differs from Kafka's default (STATIC_BROKER_CONFIG, synonym named by the broker
    config, e.g. log.retention.ms), else the default, each with the synonyms below it."""
    broker = topic_defaults(config)
    described = []
    for name, default in topic_defaults().items():
        config_type = TOPIC_CONFIG_TYPES.get(name, TYPE_STRING)
        synonyms: tuple[tuple, ...] = ((SOURCE_DEFAULT_CONFIG, default),)
        if broker[name] != default:
            broker_name = TOPIC_CONFIG_DEFAULTS_FROM[name].replace("_", ".")
            synonyms = ((SOURCE_STATIC_BROKER_CONFIG, broker[name], broker_name), *synonyms)
        if name in overrides:
            synonyms = ((SOURCE_TOPIC_CONFIG, str(overrides[name])), *synonyms)
        value, source = synonyms[0][1], synonyms[0][0]
        described.append(DescribedConfig(name, value, source, config_type, synonyms=synonyms))
    return described


def describe_broker_configs(config: BrokerConfig, port: int) -> list[DescribedConfig]:
    """A handful of this broker's configs; ``port`` is the bound one (config.port may be 0). Where
    the key names a setting, a value the broker was started with is STATIC_BROKER_CONFIG and one left
    at Kafka's default is DEFAULT_CONFIG, as Kafka tells them apart (tools list only the former as
    overridden); node id, listeners and data dir are always static (a broker cannot run without)."""
    defaults = BrokerConfig()

    def static(name: str, value: object, config_type: int, default: object = None) -> DescribedConfig:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        source = (
            SOURCE_DEFAULT_CONFIG if default is not None and value == default else SOURCE_STATIC_BROKER_CONFIG
        )
        return DescribedConfig(name, text, source, config_type, read_only=True, synonyms=((source, text),))

    def setting(attr: str, config_type: int) -> DescribedConfig:
        return static(attr.replace("_", "."), getattr(config, attr), config_type, getattr(defaults, attr))

    return [
        static("node.id", config.node_id, TYPE_INT),
        static("broker.id", config.node_id, TYPE_INT),
        static("listeners", f"PLAINTEXT://{config.host}:{port}", TYPE_STRING),
        static("log.dirs", config.data_dir, TYPE_STRING),
        setting("num_partitions", TYPE_INT),
        setting("default_replication_factor", TYPE_SHORT),
        setting("auto_create_topics_enable", TYPE_BOOLEAN),
        setting("socket_request_max_bytes", TYPE_INT),
        *(
            setting(attr, TOPIC_CONFIG_TYPES.get(name, TYPE_STRING))
            for name, attr in TOPIC_CONFIG_DEFAULTS_FROM.items()
        ),
        setting("log_retention_check_interval_ms", TYPE_LONG),
        setting("log_flush_scheduler_interval_ms", TYPE_LONG),
        setting("log_cleaner_enable", TYPE_BOOLEAN),
        setting("log_cleaner_backoff_ms", TYPE_LONG),
        setting("log_cleaner_dedupe_buffer_size", TYPE_LONG),
        setting("offsets_topic_segment_bytes", TYPE_INT),
        setting("transaction_state_log_segment_bytes", TYPE_INT),
        setting("group_initial_rebalance_delay_ms", TYPE_INT),
    ]
