"""Per-partition log settings, with Kafka's topic config names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceflow.protocol.errors import InvalidConfig

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

CLEANUP_POLICIES = ("delete", "compact")
# Kafka topic config name -> (LogConfig field, kind, minimum). Kinds: "int", "ratio" (a number in
# [0, 1]), "timestamp_type", "policy" (a comma-separated subset of CLEANUP_POLICIES).
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
        return {name: str(getattr(self, field_name)) for name, (field_name, _, _) in _TOPIC_CONFIGS.items()}

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


def _parse(name: str, raw: str | int, kind: str, minimum: int | None) -> object:
    text = str(raw).strip()
    if kind == "timestamp_type":
        if text not in TIMESTAMP_TYPES:
            raise InvalidConfig(
                f"Invalid value {text} for configuration {name}: must be one of {TIMESTAMP_TYPES}"
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
