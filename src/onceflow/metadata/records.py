"""Kafka's metadata records (``__cluster_metadata``), with Kafka's names, api keys, versions and fields.

Each record is a frozen dataclass whose fields are Kafka's, in snake_case and in wire order
(``metadata/src/main/resources/common/metadata/*.json`` in Kafka). A record's bytes are Kafka's
metadata frame: an unsigned varint frame version (1), the record's api key and its version, then the
flexible-schema body; :func:`to_bytes` and :func:`from_bytes` are what the Raft layer carries.

Versions written: those Kafka writes at ``metadata.version`` 3.6-IV2 (feature level 14), the last one
before JBOD directory assignment (KIP-858) and eligible leader replicas (KIP-966), which onceflow does
not do: RegisterBrokerRecord v2, PartitionRecord and PartitionChangeRecord v0,
BrokerRegistrationChangeRecord v0 (fencing) or v1 (controlled shutdown), the rest v0. Every version
Kafka defines is read, so a Kafka 3.7+ log decodes too (its directory and ELR fields are kept in the
record and ignored by the image).

The ACL and SCRAM records (AccessControlEntryRecord 18, RemoveAccessControlEntryRecord 19,
UserScramCredentialRecord 11, RemoveUserScramCredentialRecord 22) are a cluster's ACLs and users'
credentials (a single node keeps its own in its data dir, see ``broker/security``). Not here: the delegation-token records (DelegationTokenRecord 10,
RemoveDelegationTokenRecord 26), metadata transactions (BeginTransactionRecord 23 ...) and
RegisterControllerRecord 27 (KIP-919).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from onceflow.metadata.schema import ZERO_UUID, encode, kfield, specs, struct_reader
from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter

FRAME_VERSION = 1

# PartitionChangeRecord.leader: "no change" (-2) and "no leader" (-1); BrokerRegistrationChangeRecord's
# int8 fields: 1 set, -1 cleared (fenced only), 0 no change.
NO_LEADER = -1
NO_LEADER_CHANGE = -2
FENCE = 1
UNFENCE = -1
NO_CHANGE = 0
IN_CONTROLLED_SHUTDOWN = 1

# ConfigRecord.resource_type: Kafka's ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16

# LeaderRecoveryState (KIP-704): PartitionChangeRecord uses -1 for "no change".
RECOVERED = 0
RECOVERING = 1


class MetadataRecord:
    """Base of every metadata record class: ``API_KEY``, the versions Kafka defines, the one we write."""

    API_KEY: ClassVar[int]
    VALID_VERSIONS: ClassVar[tuple[int, int]]
    VERSION: ClassVar[int] = 0

    __slots__ = ()


_BY_API_KEY: dict[int, type[MetadataRecord]] = {}


def _record(api_key: int, valid: tuple[int, int], version: int = 0):
    def register(cls):
        cls.API_KEY = api_key
        cls.VALID_VERSIONS = valid
        cls.VERSION = version
        _BY_API_KEY[api_key] = cls
        return cls

    return register


# ---------------------------------------------------------------- brokers


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    """One listener of a broker: the name (e.g. PLAINTEXT), where it listens, its security protocol."""

    name: str = kfield("string")
    host: str = kfield("string")
    port: int = kfield("uint16")
    security_protocol: int = kfield("int16")


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFeature:
    name: str = kfield("string")
    min_supported_version: int = kfield("int16")
    max_supported_version: int = kfield("int16")


@_record(0, (0, 3), version=2)
@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord(MetadataRecord):
    broker_id: int = kfield("int32")
    is_migrating_zk_broker: bool = kfield("bool", versions="2+", default=False)
    incarnation_id: uuid.UUID = kfield("uuid")
    broker_epoch: int = kfield("int64")
    end_points: tuple[BrokerEndpoint, ...] = kfield("[]struct", struct=BrokerEndpoint, default=())
    features: tuple[BrokerFeature, ...] = kfield("[]struct", struct=BrokerFeature, default=())
    rack: str | None = kfield("string", nullable="0+", default=None)
    fenced: bool = kfield("bool", default=True)
    in_controlled_shutdown: bool = kfield("bool", versions="1+", default=False)
    log_dirs: tuple[uuid.UUID, ...] = kfield("[]uuid", versions="3+", tag=0, default=())


@_record(1, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord(MetadataRecord):
    broker_id: int = kfield("int32")
    broker_epoch: int = kfield("int64")


@_record(7, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord(MetadataRecord):
    id: int = kfield("int32")
    epoch: int = kfield("int64")


@_record(8, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord(MetadataRecord):
    id: int = kfield("int32")
    epoch: int = kfield("int64")


@_record(17, (0, 2))
@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord(MetadataRecord):
    broker_id: int = kfield("int32")
    broker_epoch: int = kfield("int64")
    fenced: int = kfield("int8", tag=0, default=NO_CHANGE)
    in_controlled_shutdown: int = kfield("int8", versions="1+", tag=1, default=NO_CHANGE)
    log_dirs: tuple[uuid.UUID, ...] = kfield("[]uuid", versions="2+", tag=2, default=())


# ---------------------------------------------------------------- topics and partitions


@_record(2, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord(MetadataRecord):
    name: str = kfield("string")
    topic_id: uuid.UUID = kfield("uuid")


@_record(3, (0, 2))
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord(MetadataRecord):
    partition_id: int = kfield("int32", default=-1)
    topic_id: uuid.UUID = kfield("uuid", default=ZERO_UUID)
    replicas: tuple[int, ...] = kfield("[]int32", default=())
    isr: tuple[int, ...] = kfield("[]int32", default=())
    removing_replicas: tuple[int, ...] = kfield("[]int32", default=())
    adding_replicas: tuple[int, ...] = kfield("[]int32", default=())
    leader: int = kfield("int32", default=NO_LEADER)
    leader_recovery_state: int = kfield("int8", tag=0, default=RECOVERED)
    leader_epoch: int = kfield("int32", default=-1)
    partition_epoch: int = kfield("int32", default=-1)
    directories: tuple[uuid.UUID, ...] = kfield("[]uuid", versions="1+", default=())
    eligible_leader_replicas: tuple[int, ...] | None = kfield(
        "[]int32", versions="2+", nullable="2+", tag=1, default=None
    )
    last_known_elr: tuple[int, ...] | None = kfield(
        "[]int32", versions="2+", nullable="2+", tag=2, default=None
    )


@_record(5, (0, 2))
@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord(MetadataRecord):
    """A change to one partition: each field is None (or NO_LEADER_CHANGE / -1) when it did not change."""

    partition_id: int = kfield("int32", default=-1)
    topic_id: uuid.UUID = kfield("uuid", default=ZERO_UUID)
    isr: tuple[int, ...] | None = kfield("[]int32", nullable="0+", tag=0, default=None)
    leader: int = kfield("int32", tag=1, default=NO_LEADER_CHANGE)
    replicas: tuple[int, ...] | None = kfield("[]int32", nullable="0+", tag=2, default=None)
    removing_replicas: tuple[int, ...] | None = kfield("[]int32", nullable="0+", tag=3, default=None)
    adding_replicas: tuple[int, ...] | None = kfield("[]int32", nullable="0+", tag=4, default=None)
    leader_recovery_state: int = kfield("int8", tag=5, default=-1)
    directories: tuple[uuid.UUID, ...] | None = kfield(
        "[]uuid", versions="1+", nullable="1+", tag=8, default=None
    )
    eligible_leader_replicas: tuple[int, ...] | None = kfield(
        "[]int32", versions="2+", nullable="2+", tag=6, default=None
    )
    last_known_elr: tuple[int, ...] | None = kfield(
        "[]int32", versions="2+", nullable="2+", tag=7, default=None
    )


@_record(9, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord(MetadataRecord):
    topic_id: uuid.UUID = kfield("uuid")


# ---------------------------------------------------------------- configs, features, quotas, producer ids


@_record(4, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord(MetadataRecord):
    """One config key of one resource; a null ``value`` deletes the key."""

    resource_type: int = kfield("int8")
    resource_name: str = kfield("string")
    name: str = kfield("string")
    value: str | None = kfield("string", nullable="0+", default=None)


@_record(12, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord(MetadataRecord):
    name: str = kfield("string")
    feature_level: int = kfield("int16")


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityData:
    """One part of a quota entity: its type (user, client-id, ip) and name (None: the default)."""

    entity_type: str = kfield("string")
    entity_name: str | None = kfield("string", nullable="0+", default=None)


@_record(14, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord(MetadataRecord):
    entity: tuple[EntityData, ...] = kfield("[]struct", struct=EntityData)
    key: str = kfield("string")
    value: float = kfield("float64", default=0.0)
    remove: bool = kfield("bool", default=False)


@_record(15, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord(MetadataRecord):
    """A block of producer ids handed to a broker: the next block starts at ``next_producer_id``."""

    broker_id: int = kfield("int32")
    broker_epoch: int = kfield("int64", default=-1)
    next_producer_id: int = kfield("int64", default=0)


# ---------------------------------------------------------------- ACLs and SCRAM credentials


@_record(18, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord(MetadataRecord):
    """One ACL binding, by its id; the codes are Kafka's (``protocol.acl_types``)."""

    id: uuid.UUID = kfield("uuid")
    resource_type: int = kfield("int8")
    resource_name: str = kfield("string")
    pattern_type: int = kfield("int8")
    principal: str = kfield("string")
    host: str = kfield("string")
    operation: int = kfield("int8")
    permission_type: int = kfield("int8")


@_record(19, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    id: uuid.UUID = kfield("uuid")


@_record(11, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512): never the password."""

    name: str = kfield("string")
    mechanism: int = kfield("int8")
    salt: bytes = kfield("bytes")
    stored_key: bytes = kfield("bytes")
    server_key: bytes = kfield("bytes")
    iterations: int = kfield("int32")


@_record(22, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    name: str = kfield("string")
    mechanism: int = kfield("int8")


@_record(20, (0, 0))
@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord(MetadataRecord):
    """Written periodically by the active controller so that followers see the log advance."""


# ---------------------------------------------------------------- the frame


def _uvarint_small(r: SchemaReader, what: str) -> int:
    try:
        value = r.uvarint()
    except CorruptMessage as exc:
        raise CorruptMessage(f"metadata record: error while reading {what}: {exc}") from exc
    if value > 0x7FFF:
        raise CorruptMessage(f"metadata record: value for {what} was too large ({value})")
    return value


def record_class(api_key: int) -> type[MetadataRecord]:
    cls = _BY_API_KEY.get(api_key)
    if cls is None:
        raise CorruptMessage(f"unknown metadata record type {api_key}")
    return cls


def write_version(record: Any) -> int:
    """The version we write ``record`` at: its class's, or the first later one that can carry every
    field it sets (BrokerRegistrationChangeRecord v1 for a controlled shutdown, as Kafka)."""
    cls = type(record)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    needed = [
        spec for name, spec in specs(cls) if getattr(record, name) != defaults.get(name, dataclasses.MISSING)
    ]
    for version in range(cls.VERSION, cls.VALID_VERSIONS[1] + 1):
        if all(spec.present(version) for spec in needed):
            return version
    return cls.VERSION


def to_bytes(record: Any, version: int | None = None) -> bytes:
    """The record in Kafka's metadata frame, at ``version`` (default: :func:`write_version`)."""
    cls = type(record)
    if version is None:
        version = write_version(record)
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise ValueError(f"{cls.__name__} has no version {version} (valid: {low}-{high})")
    w = SchemaWriter(flexible=True)
    w.uvarint(FRAME_VERSION)
    w.uvarint(cls.API_KEY)
    w.uvarint(version)
    return w.done() + encode(record, version)


def from_bytes_with_version(data: bytes) -> tuple[Any, int]:
    """A record and the version it was written at, from its framed bytes."""
    r = SchemaReader(data, "metadata", flexible=True)
    frame = _uvarint_small(r, "frame version")
    if frame != FRAME_VERSION:
        raise CorruptMessage(
            f"metadata record has unknown frame version {frame} (only {FRAME_VERSION} is read)"
        )
    cls = record_class(_uvarint_small(r, "type"))
    version = _uvarint_small(r, "version")
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise CorruptMessage(f"{cls.__name__} version {version} is not one Kafka defines ({low}-{high})")
    record = struct_reader(cls, version)(r)
    if r.pos != len(r.buf):
        raise CorruptMessage(f"{len(r.buf) - r.pos} byte(s) of garbage after a {cls.__name__}")
    return record, version


def from_bytes(data: bytes) -> Any:
    """A record from its framed bytes (any version Kafka defines)."""
    return from_bytes_with_version(data)[0]


ALL_RECORD_CLASSES: tuple[type[MetadataRecord], ...] = tuple(_BY_API_KEY[k] for k in sorted(_BY_API_KEY))
