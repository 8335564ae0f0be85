"""Consumer configuration: Kafka's names and defaults, checked when the consumer is built.

Fields are Kafka's config names in snake case (``group.id`` → ``group_id``). :meth:`ConsumerConfig.from_dict`
takes Kafka's dotted names as a Java or librdkafka user would write them, so configs carry over.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onceflow.client.security import ClientSecurity, client_security, with_security_fields
from onceflow.protocol.errors import InvalidConfig

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
KNOWN_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
CLASSIC = "classic"
CONSUMER = "consumer"
GROUP_PROTOCOLS = (CLASSIC, CONSUMER)


@dataclass(slots=True)
@with_security_fields  # TLS and SASL, librdkafka's names (client/security.py); PLAINTEXT by default
class ConsumerConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "onceflow-consumer"
    group_id: str | None = None
    group_instance_id: str | None = None
    # "consumer": KIP-848's protocol, where the coordinator assigns partitions (then
    # partition.assignment.strategy and session.timeout.ms are the broker's business and not used here).
    group_protocol: str = CLASSIC
    group_remote_assignor: str | None = (
        None  # the coordinator's assignor ("uniform", "range"); None: its default
    )
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    isolation_level: str = READ_UNCOMMITTED
    max_poll_records: int = 500
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 1048576
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    rebalance_timeout_ms: int | None = None  # Kafka uses max.poll.interval.ms; None means that
    # Kafka 3.x's default list: range first, cooperative-sticky so a group can migrate to it.
    partition_assignment_strategy: list[str] = field(default_factory=lambda: ["range", "cooperative-sticky"])
    request_timeout_ms: int = 30000
    # How long commit(), committed() and position() wait for the coordinator or broker before raising
    # ConsumerTimeout, unless given their own timeout (Kafka's default.api.timeout.ms).
    default_api_timeout_ms: int = 60000
    retry_backoff_ms: int = 100
    check_crcs: bool = True
    metadata_max_age_ms: int = 300000
    # Sent as Metadata's allow_auto_topic_creation when asking for the subscribed topics: a broker with
    # auto.create.topics.enable creates a missing one only if this allows it too.
    allow_auto_create_topics: bool = True

    def __post_init__(self) -> None:
        _convert_strings(self)
        if isinstance(self.partition_assignment_strategy, str):
            self.partition_assignment_strategy = [
                s.strip() for s in self.partition_assignment_strategy.split(",") if s.strip()
            ]
        self.partition_assignment_strategy = [_assignor_name(s) for s in self.partition_assignment_strategy]
        self.validate()

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> ConsumerConfig:
        """Build from Kafka's dotted names (``{"group.id": "g", "auto.offset.reset": "earliest"}``)."""
        return cls.from_settings(settings)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None):
        """From Kafka's dotted names and/or their snake-case forms (keyword arguments); a name that is
        not a consumer setting is refused under its Kafka name, with the nearest one suggested."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in {**settings, **(overrides or {})}.items():
            name = str(key).replace(".", "_")
            if name not in names:
                raise InvalidConfig(
                    f"unknown consumer config {_kafka_name(name)!r}{_suggestion(name, names)}"
                )
            kwargs[name] = value
        return cls(**kwargs)

    @property
    def security(self) -> ClientSecurity | None:
        """The TLS/SASL settings, or None for a plain connection."""
        return client_security(self)

    @property
    def isolation_level_code(self) -> int:
        """The wire value: 0 read_uncommitted, 1 read_committed."""
        return 1 if self.isolation_level == READ_COMMITTED else 0

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.max_poll_interval_ms if self.rebalance_timeout_ms is None else self.rebalance_timeout_ms

    def validate(self) -> None:
        if self.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise InvalidConfig(
                f"isolation.level={self.isolation_level!r}: use {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}"
            )
        if self.auto_offset_reset not in OFFSET_RESET_POLICIES:
            raise InvalidConfig(
                f"auto.offset.reset={self.auto_offset_reset!r}: use one of {', '.join(OFFSET_RESET_POLICIES)}"
            )
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise InvalidConfig(f"group.protocol={self.group_protocol!r}: use {CLASSIC!r} or {CONSUMER!r}")
        if self.group_remote_assignor is not None and self.group_protocol != CONSUMER:
            raise InvalidConfig("group.remote.assignor needs group.protocol=consumer")
        if not self.partition_assignment_strategy:
            raise InvalidConfig("partition.assignment.strategy must name at least one assignor")
        for name in (
            "max_poll_records",
            "auto_commit_interval_ms",
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "max_poll_interval_ms",
            "request_timeout_ms",
            "default_api_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"{name.replace('_', '.')} must be positive, got {getattr(self, name)}")
        if self.fetch_min_bytes < 0 or self.fetch_max_wait_ms < 0:
            raise InvalidConfig("fetch.min.bytes and fetch.max.wait.ms must not be negative")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfig(
                f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than session.timeout.ms "
                f"({self.session_timeout_ms}), else the coordinator expires the member between heartbeats"
            )
        if self.group_id is None and self.group_instance_id is not None:
            raise InvalidConfig("group.instance.id needs a group.id")
        if self.group_id is not None and not self.group_id:
            raise InvalidConfig("group.id must not be empty: leave it unset to consume without a group")
        client_security(self)  # refuses bad TLS/SASL settings now


_ASSIGNOR_ALIASES = {
    "range": "range",
    "rangeassignor": "range",
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "roundrobin": "roundrobin",
    "round-robin": "roundrobin",
    "roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
    "cooperativestickyassignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}


def _assignor_name(name: str) -> str:
    try:
        return _ASSIGNOR_ALIASES[name.strip().lower()]
    except KeyError:
        raise InvalidConfig(
            f"unknown partition.assignment.strategy {name!r}: use {', '.join(KNOWN_ASSIGNORS)}"
        ) from None


# Settings that may arrive as strings (properties files, command lines): "500" means 500 here too, as
# Kafka's ConfigDef parses them; any other type is refused under the setting's Kafka name.
_INT_FIELDS = frozenset(
    {
        "auto_commit_interval_ms",
        "max_poll_records",
        "fetch_min_bytes",
        "fetch_max_wait_ms",
        "fetch_max_bytes",
        "max_partition_fetch_bytes",
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "max_poll_interval_ms",
        "rebalance_timeout_ms",
        "request_timeout_ms",
        "default_api_timeout_ms",
        "retry_backoff_ms",
        "metadata_max_age_ms",
    }
)
_BOOL_FIELDS = frozenset({"enable_auto_commit", "check_crcs", "allow_auto_create_topics"})
_STR_FIELDS = frozenset(
    {
        "bootstrap_servers",
        "client_id",
        "group_id",
        "group_instance_id",
        "group_protocol",
        "group_remote_assignor",
        "auto_offset_reset",
        "isolation_level",
    }
)


def _convert_strings(config: ConsumerConfig) -> None:
    for name in _INT_FIELDS:
        value = getattr(config, name)
        if value is None and name == "rebalance_timeout_ms":
            continue
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise InvalidConfig(f"{_kafka_name(name)}={value!r} is not an integer") from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfig(
                f"{_kafka_name(name)} must be an integer, not {type(value).__name__} {value!r}"
            )
        setattr(config, name, int(value))
    for name in _BOOL_FIELDS:
        value = getattr(config, name)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            setattr(config, name, value.strip().lower() == "true")
        elif type(value) is not bool:
            raise InvalidConfig(f"{_kafka_name(name)}={value!r} is not a boolean (true or false)")
    for name in _STR_FIELDS:
        value = getattr(config, name)
        if value is not None and not isinstance(value, str):
            raise InvalidConfig(f"{_kafka_name(name)} must be a string, not {type(value).__name__} {value!r}")
    if isinstance(config.isolation_level, str):
        config.isolation_level = config.isolation_level.strip().lower()
    if isinstance(config.auto_offset_reset, str):
        config.auto_offset_reset = config.auto_offset_reset.strip().lower()


def _kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")


def _suggestion(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return f" (did you mean {_kafka_name(close[0])!r}?)" if close else ""
