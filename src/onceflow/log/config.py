"""Per-partition log settings, with Kafka's topic config names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceflow.protocol.errors import InvalidConfig

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

CLEANUP_POLICIES = ("delete", "compact")
# compression.type: "producer" keeps each batch's codec; any other value is the codec the log stores
# (the broker recompresses batches that differ; "uncompressed" is codec none).
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
# Kafka's valid compression levels (KIP-390); gzip's -1 is Deflater's default (6).
_LEVELS = {
    "compression.gzip.level": (1, 9, (-1,)),
    "compression.lz4.level": (1, 17, ()),
    "compression.zstd.level": (-131072, 22, ()),
}
# Kafka topic config name -> (LogConfig field, kind, minimum). Kinds: "int", "ratio" (a number in
# [0, 1]), "timestamp_type", "policy" (a comma-separated subset of CLEANUP_POLICIES), "bool",
# "compression" (one of COMPRESSION_TYPES), "level" (see _LEVELS), "list" (comma-separated text).
_TOPIC_CONFIGS: dict[str, tuple[str, str, int | None]] = {
    "segment.bytes": ("segment_bytes", "int", 14),  # Kafka: at least LegacyRecord.RECORD_OVERHEAD_V0
    "segment.ms": ("segment_ms", "int", 1),
    "retention.ms": ("retention_ms", "int", -1),
    "retention.bytes": ("retention_bytes", "int", None),
    "index.interval.bytes": ("index_interval_bytes", "int", 0),
    "segment.index.bytes": ("segment_index_bytes", "int", 4),
    "message.timestamp.type": ("message_timestamp_type", "timestamp_type", None),
    "max.message.bytes": ("max_message_bytes", "int", 0),
    "cleanup.policy": ("cleanup_policy", "policy", None),
    "delete.retention.ms": ("delete_retention_ms", "int", 0),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "ratio", None),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "int", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "int", 1),
    "compression.type": ("compression_type", "compression", None),
    "compression.gzip.level": ("compression_gzip_level", "level", None),
    "compression.lz4.level": ("compression_lz4_level", "level", None),
    "compression.zstd.level": ("compression_zstd_level", "level", None),
    "min.insync.replicas": ("min_insync_replicas", "int", 1),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", "int", 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", "int", 0),
    "flush.messages": ("flush_messages", "int", 1),
    "flush.ms": ("flush_ms", "int", 0),
    # Accepted and described with Kafka's defaults, with no effect here: replication and leader
    # election (one broker), tiered storage (none; enabling it is refused), and hints about files.
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "bool", None),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", "list", None),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", "list", None),
    "remote.storage.enable": ("remote_storage_enable", "bool", None),
    "remote.log.copy.disable": ("remote_log_copy_disable", "bool", None),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", "bool", None),
    "local.retention.ms": ("local_retention_ms", "int", -2),
    "local.retention.bytes": ("local_retention_bytes", "int", -2),
    "segment.jitter.ms": ("segment_jitter_ms", "int", 0),
    "preallocate": ("preallocate", "bool", None),
    "file.delete.delay.ms": ("file_delete_delay_ms", "int", 0),
    "message.downconversion.enable": ("message_downconversion_enable", "bool", None),
}
_INT32_CONFIGS = frozenset(
    {"segment.bytes", "index.interval.bytes", "segment.index.bytes", "max.message.bytes"}
)


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000  # -1 keeps segments forever
    retention_bytes: int = -1  # -1 has no size limit
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    cleanup_policy: str = "delete"  # "delete", "compact" or both ("compact,delete")
    # Compaction (log.cleaner): how long tombstones and transaction markers outlive what they delete or
    # end, the share of not-yet-compacted bytes that starts a cleaning, and how old a record must be
    # before it may be compacted away.
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    # A record older than this is compacted even while the dirty ratio is below the minimum.
    max_compaction_lag_ms: int = _INT64_MAX
    # The codec batches are stored with ("producer": as sent), and the levels the broker compresses at.
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    # An acks=all produce needs this many in-sync replicas: one broker has one, so above 1 such
    # produces fail with NOT_ENOUGH_REPLICAS, as a Kafka partition whose ISR shrank to one.
    min_insync_replicas: int = 1
    # CreateTime records must be at most this much older / newer than the broker's clock.
    message_timestamp_before_max_ms: int = _INT64_MAX
    message_timestamp_after_max_ms: int = _INT64_MAX
    # fsync after this many records, or when this long has passed since the last fsync (Kafka's
    # defaults: never; durability comes from replication, and here from the page cache surviving a
    # process crash).
    flush_messages: int = _INT64_MAX
    flush_ms: int = _INT64_MAX
    unclean_leader_election_enable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    segment_jitter_ms: int = 0
    preallocate: bool = False
    file_delete_delay_ms: int = 60000
    message_downconversion_enable: bool = True

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str | int | None]) -> LogConfig:
        """A LogConfig from Kafka topic configs (``{"retention.ms": "1000"}``); unset keys keep defaults.

        Raises InvalidConfig naming the first unknown key or bad value.
        """
        values: dict[str, object] = {}
        for name, raw in configs.items():
            spec = _TOPIC_CONFIGS.get(name)
            if spec is None:
                raise InvalidConfig(f"Unknown topic config name: {name}")
            if raw is None:
                continue
            field_name, kind, minimum = spec
            values[field_name] = _parse(name, raw, kind, minimum)
        return cls(**values)

    def to_topic_configs(self) -> dict[str, str]:
        """The Kafka name -> string value of every setting (for DescribeConfigs and persistence)."""
        return {name: _text(getattr(self, field_name)) for name, (field_name, _, _) in _TOPIC_CONFIGS.items()}

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log (keeps the last record of each key)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether retention.ms and retention.bytes delete old segments of this log."""
        return "delete" in self.cleanup_policy.split(",")


_CHOICES = {"compression": COMPRESSION_TYPES, "timestamp_type": TIMESTAMP_TYPES}


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parse(name: str, raw: str | int, kind: str, minimum: int | None) -> object:
    text = str(raw).strip()
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise InvalidConfig(
                f"Invalid value {text} for configuration {name}: Expected value to be either true or false"
            )
        if name == "remote.storage.enable" and text.lower() == "true":
            raise InvalidConfig(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
            )
        return text.lower() == "true"
    if kind == "list":
        return ",".join(part.strip() for part in text.split(",") if part.strip())
    if kind == "level":
        low, high, also = _LEVELS[name]
        try:
            level = int(text)
        except ValueError:
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: not a number")
        if not (low <= level <= high or level in also):
            raise InvalidConfig(f"Invalid value {level} for configuration {name}: must be in [{low}, {high}]")
        return level
    choices = _CHOICES.get(kind)
    if choices is not None:
        if text not in choices:
            raise InvalidConfig(
                f"Invalid value {text} for configuration {name}: String must be one of: {', '.join(choices)}"
            )
        return text
    if kind == "policy":
        policies = [part.strip() for part in text.split(",")]
        if (
            not text
            or any(p not in CLEANUP_POLICIES for p in policies)
            or len(set(policies)) != len(policies)
        ):
            raise InvalidConfig(
                f"Invalid value {text} for configuration {name}: must be a list of {CLEANUP_POLICIES}"
            )
        return ",".join(policies)
    if kind == "ratio":
        try:
            ratio = float(text)
        except ValueError:
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: not a number")
        if not 0.0 <= ratio <= 1.0:
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: must be in [0, 1]")
        return ratio
    try:
        value = int(text)
    except ValueError:
        raise InvalidConfig(f"Invalid value {text} for configuration {name}: not a number")
    upper = _INT32_MAX if name in _INT32_CONFIGS else _INT64_MAX
    if value > upper or (minimum is not None and value < minimum):
        raise InvalidConfig(
            f"Invalid value {value} for configuration {name}: must be in [{minimum}, {upper}]"
        )
    return value


TOPIC_CONFIG_DEFAULTS: dict[str, str] = LogConfig().to_topic_configs()
