"""Producer configuration: Kafka's names and defaults (Kafka 4.x), checked when it is built.

Build it from Kafka's dotted names (``ProducerConfig.from_mapping({"linger.ms": 10})``) or from the
snake-case fields (``ProducerConfig(linger_ms=10)``). Every check happens at construction, and a
refusal says what is wrong and why, so a misconfigured producer never reaches the network.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.client.security import ClientSecurity, client_security, with_security_fields
from onceflow.protocol.compression import codec_for_name
from onceflow.protocol.errors import InvalidConfig

# The broker keeps the metadata of the last 5 batches per producer and partition
# (ProducerStateEntry.NUM_BATCHES_TO_RETAIN); a retried batch older than that is not recognised as a
# duplicate, so with idempotence at most 5 requests may be in flight per connection.
MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
DEFAULT_TRANSACTION_TIMEOUT_MS = 60000

ROUND_ROBIN_NAMES = frozenset(
    {
        "round_robin",
        "roundrobin",
        "RoundRobinPartitioner",
        "org.apache.kafka.clients.producer.RoundRobinPartitioner",
    }
)


@dataclass(frozen=True, slots=True)
@with_security_fields  # TLS and SASL, librdkafka's names (client/security.py); PLAINTEXT by default
class ProducerConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "onceflow-producer"
    acks: int | str = "all"  # normalised to -1 / 0 / 1
    # None: on unless another setting conflicts (as Kafka: implicit idempotence yields silently,
    # an explicit `true` with a conflicting setting is refused).
    enable_idempotence: bool | None = None
    max_in_flight_requests_per_connection: int = 5
    retries: int = 2147483647
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    linger_ms: int = 5  # Kafka 4.0 default (KIP-1030)
    batch_size: int = 16384
    buffer_memory: int = 33554432
    max_block_ms: int = 60000
    max_request_size: int = 1048576
    compression_type: str = "none"
    partitioner_class: str | None = None  # None: murmur2 for keys, uniform sticky without
    partitioner_ignore_keys: bool = False
    metadata_max_age_ms: int = 300000
    transactional_id: str | None = None
    # None: Kafka's default, 60000. Refused when set together with transaction.two.phase.commit.enable.
    transaction_timeout_ms: int | None = None
    # KIP-939: the transactions of this producer take part in a two-phase commit run by an external
    # coordinator: prepare_transaction(), complete_transaction(), init_transactions(keep_prepared_txn=True),
    # and the broker never aborts them on a timeout (it must allow it: the broker's setting of the same name).
    transaction_two_phase_commit_enable: bool = False
    # Not a Kafka setting: allows idempotence with more than 5 in flight, which the broker cannot
    # deduplicate. Exists only to demonstrate that failure (the seeds' six-in-flight flow).
    unsafe_allow_max_in_flight_above_5: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise in place once
        _convert_strings(self)
        set_(self, "acks", _normalise_acks(self.acks))
        if self.transaction_two_phase_commit_enable:
            if self.transactional_id is None:
                raise InvalidConfig(
                    "transaction.two.phase.commit.enable=true needs a transactional.id: only transactions "
                    "take part in a two-phase commit"
                )
            if self.transaction_timeout_ms is not None:
                raise InvalidConfig(
                    "transaction.timeout.ms cannot be set when transaction.two.phase.commit.enable is true: "
                    "a two-phase commit transaction never times out (its coordinator decides its outcome)"
                )
        if self.transaction_timeout_ms is None:
            set_(self, "transaction_timeout_ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        for name in (
            "max_in_flight_requests_per_connection",
            "batch_size",
            "buffer_memory",
            "request_timeout_ms",
            "delivery_timeout_ms",
            "max_request_size",
        ):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"{_kafka_name(name)} must be positive, not {getattr(self, name)}")
        for name in ("retries", "retry_backoff_ms", "linger_ms", "max_block_ms", "transaction_timeout_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfig(f"{_kafka_name(name)} must not be negative, not {getattr(self, name)}")
        try:
            codec_for_name(self.compression_type)
        except Exception:
            raise InvalidConfig(
                f"compression.type {self.compression_type!r} is not one of none, gzip, snappy, lz4, zstd"
            )
        if self.partitioner_class not in (None, "default", "sticky", *ROUND_ROBIN_NAMES):
            raise InvalidConfig(
                f"partitioner.class {self.partitioner_class!r}: use None (Kafka's built-in: murmur2 for keys, "
                "uniform sticky without) or RoundRobinPartitioner"
            )
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise InvalidConfig(
                f"delivery.timeout.ms ({self.delivery_timeout_ms}) must be at least linger.ms + "
                f"request.timeout.ms ({self.linger_ms + self.request_timeout_ms}): a batch needs that long "
                "for one attempt"
            )
        set_(self, "enable_idempotence", self._resolve_idempotence())
        client_security(self)  # refuses bad TLS/SASL settings now
        if self.transactional_id is not None and not self.enable_idempotence:
            raise InvalidConfig(
                "transactional.id needs enable.idempotence=true: transactions are built on producer ids "
                "and sequence numbers"
            )

    def _resolve_idempotence(self) -> bool:
        conflicts = []
        too_many = self.max_in_flight_requests_per_connection > MAX_IN_FLIGHT_WITH_IDEMPOTENCE
        if too_many and not self.unsafe_allow_max_in_flight_above_5:
            conflicts.append(
                f"max.in.flight.requests.per.connection={self.max_in_flight_requests_per_connection} is above "
                f"{MAX_IN_FLIGHT_WITH_IDEMPOTENCE}: the broker remembers only the last "
                f"{MAX_IN_FLIGHT_WITH_IDEMPOTENCE} batches per producer and partition, so a retry of an "
                "older batch would be written twice"
            )
        if self.acks != -1:
            conflicts.append(
                f"acks={self.acks}: idempotence needs acks=all, or an acknowledged batch could be lost "
                "and its sequence numbers reused"
            )
        if self.retries == 0:
            conflicts.append("retries=0: idempotence exists to make retries safe, it needs retries > 0")
        explicit = self.enable_idempotence
        if explicit is None:
            if self.transactional_id is not None and conflicts:
                raise InvalidConfig("transactional.id is set, but " + "; ".join(conflicts))
            return not conflicts
        if explicit and conflicts:
            raise InvalidConfig("enable.idempotence=true is refused: " + "; ".join(conflicts))
        return bool(explicit)

    @property
    def security(self) -> ClientSecurity | None:
        """The TLS/SASL settings, or None for a plain connection."""
        return client_security(self)

    @property
    def compression_codec(self) -> int:
        return int(codec_for_name(self.compression_type))

    @property
    def round_robin(self) -> bool:
        return self.partitioner_class in ROUND_ROBIN_NAMES

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any] | None = None, **overrides: Any) -> ProducerConfig:
        """From Kafka's dotted names (``{"linger.ms": 10}``); unknown names are refused by name."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in {**(settings or {}), **overrides}.items():
            name = key.replace(".", "_")
            if name not in fields:
                close = difflib.get_close_matches(name, sorted(fields), n=1, cutoff=0.75)
                hint = f" (did you mean {_kafka_name(close[0])!r}?)" if close else ""
                raise InvalidConfig(f"unknown producer setting {_kafka_name(name)!r}{hint}")
            values[name] = value
        return cls(**values)

    def to_mapping(self) -> dict[str, Any]:
        """The settings under Kafka's dotted names (``from_mapping`` of it gives an equal config)."""
        mapping = {_kafka_name(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.transaction_two_phase_commit_enable:
            del mapping["transaction.timeout.ms"]  # the default; setting it is refused with 2PC
        return mapping


# Fields whose values may arrive as strings (properties files, Spark options, command lines): Kafka's
# Java client parses them with ConfigDef, so "1000" means 1000 and "true" means True here too.
_INT_FIELDS = frozenset(
    {
        "max_in_flight_requests_per_connection",
        "retries",
        "retry_backoff_ms",
        "retry_backoff_max_ms",
        "request_timeout_ms",
        "delivery_timeout_ms",
        "linger_ms",
        "batch_size",
        "buffer_memory",
        "max_block_ms",
        "max_request_size",
        "metadata_max_age_ms",
        "transaction_timeout_ms",
    }
)
_BOOL_FIELDS = frozenset(
    {
        "enable_idempotence",
        "partitioner_ignore_keys",
        "unsafe_allow_max_in_flight_above_5",
        "transaction_two_phase_commit_enable",
    }
)
_STR_FIELDS = frozenset(
    {"bootstrap_servers", "client_id", "compression_type", "partitioner_class", "transactional_id"}
)


def _convert_strings(config: ProducerConfig) -> None:
    """Turn numeric and boolean settings given as strings into ints and bools (as ConfigDef does);
    anything else of the wrong type is refused with the setting's Kafka name."""
    for name in _INT_FIELDS:
        value = getattr(config, name)
        if type(value) is int or (value is None and name == "transaction_timeout_ms"):
            continue
        if isinstance(value, str):
            try:
                converted = int(value.strip())
            except ValueError:
                raise InvalidConfig(f"{_kafka_name(name)}={value!r} is not an integer") from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfig(
                f"{_kafka_name(name)} must be an integer, not {type(value).__name__} {value!r}"
            )
        else:
            converted = int(value)  # an int subclass
        object.__setattr__(config, name, converted)
    for name in _BOOL_FIELDS:
        value = getattr(config, name)
        if value is None or type(value) is bool:
            continue
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            object.__setattr__(config, name, value.strip().lower() == "true")
        else:
            raise InvalidConfig(f"{_kafka_name(name)}={value!r} is not a boolean (true or false)")
    for name in _STR_FIELDS:
        value = getattr(config, name)
        if value is not None and not isinstance(value, str):
            raise InvalidConfig(f"{_kafka_name(name)} must be a string, not {type(value).__name__} {value!r}")


def _kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")


def _normalise_acks(acks: int | str) -> int:
    value = str(acks).strip().lower()
    if value in ("all", "-1"):
        return -1
    if value in ("0", "1"):
        return int(value)
    raise InvalidConfig(f"acks must be all, -1, 0 or 1, not {acks!r}")
