"""The metadata image: the cluster's state after replaying the metadata log up to some offset.

An image is immutable: replaying records (:meth:`MetadataImage.apply`, or a batch through
:class:`onceflow.metadata.delta.MetadataDelta`) returns a new image that shares every unchanged part
with the old one, so a controller can keep its committed image beside the newer uncommitted one and
a broker can compare the image before and after a batch to see what changed for it
(:func:`onceflow.metadata.delta.local_changes`). Its parts mirror Kafka's ``MetadataImage``:
features, cluster (broker registrations), topics and their partitions, configs, client quotas, the
producer-id allocator, ACLs (by their ids) and users' SCRAM credentials.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from onceflow.metadata.acls import AclBinding
from onceflow.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERED,
    RESOURCE_TOPIC,
    BrokerEndpoint,
    BrokerFeature,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)
from onceflow.metadata.scram import ScramCredential

METADATA_VERSION = "metadata.version"
# Kafka's MetadataVersion feature levels we know by name: 3.6-IV2 is the level onceflow bootstraps
# with (the record versions in records.py are those it writes).
METADATA_VERSION_3_3_IV3 = 7
METADATA_VERSION_3_6_IV2 = 14
DEFAULT_METADATA_VERSION = METADATA_VERSION_3_6_IV2

_EMPTY: Mapping = MappingProxyType({})


def frozen(mapping: dict) -> Mapping:
    """A read-only view of a dict that nobody else holds (the image's maps are never mutated)."""
    return MappingProxyType(mapping)


class ReplayError(ValueError):
    """A record that cannot apply to the image it follows (a broken log, or a controller bug)."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker, as its RegisterBrokerRecord and later changes describe it."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    @property
    def active(self) -> bool:
        """Unfenced and not shutting down: may lead partitions and receive new replicas."""
        return not self.fenced and not self.in_controlled_shutdown

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        for endpoint in self.listeners:
            if endpoint.name == listener:
                return endpoint
        return None

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            listeners=record.end_points,
            features=record.features,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=self.listeners,
            features=self.features,
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
        )


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition: its replicas in preferred order, ISR, leader and the two epochs.

    ``leader_epoch`` grows each time the leader field is set (a new leader, or a bump for the same
    one); ``partition_epoch`` grows with every change of any kind, and is what AlterPartition checks.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_replica

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader_recovery_state=record.leader_recovery_state,
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``change``: unchanged fields stay, the partition epoch always grows,
        the leader epoch grows whenever the record sets the leader (even to the same broker)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if change.leader_recovery_state != -1:
            recovery = change.leader_recovery_state
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas
            if change.removing_replicas is None
            else change.removing_replicas,
            adding_replicas=self.adding_replicas
            if change.adding_replicas is None
            else change.adding_replicas,
            leader_recovery_state=recovery,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _EMPTY)

    def partition(self, index: int) -> PartitionRegistration | None:
        return self.partitions.get(index)


# A client-quota entity: its (entity type, entity name or None for the default) pairs, sorted.
QuotaEntity = tuple[tuple[str, str | None], ...]
# A config resource: (Kafka's ConfigResource type id, name); the cluster-wide broker default is (4, "").
ConfigResource = tuple[int, str]
# A SCRAM credential's key: (user, mechanism name such as "SCRAM-SHA-256").
ScramKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The whole metadata state. Empty maps by default: ``MetadataImage()`` is the empty log's image."""

    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY)
    topics: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)
    next_producer_id: int = 0
    # ACL bindings by their ids (AccessControlEntryRecord); a binding is there at most once.
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=lambda: _EMPTY)
    scram_credentials: Mapping[ScramKey, ScramCredential] = field(default_factory=lambda: _EMPTY)
    # Not part of equality: a cache of (listener, unfenced brokers) lists for Metadata responses.
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    EMPTY: ClassVar[MetadataImage]  # the empty log's image, set below

    # ------------------------------------------------------------ replay

    def apply(self, record: Any) -> MetadataImage:
        """The image after one record (for many, a :class:`MetadataDelta` is cheaper)."""
        from onceflow.metadata.delta import MetadataDelta

        delta = MetadataDelta(self)
        delta.replay(record)
        return delta.apply()

    def apply_all(self, records) -> MetadataImage:
        from onceflow.metadata.delta import MetadataDelta

        delta = MetadataDelta(self)
        for record in records:
            delta.replay(record)
        return delta.apply()

    # ------------------------------------------------------------ features

    @property
    def metadata_version(self) -> int:
        """The finalized ``metadata.version`` feature level (0 before the bootstrap record)."""
        return self.features.get(METADATA_VERSION, 0)

    # ------------------------------------------------------------ brokers

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not in controlled shutdown."""
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.active

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    def alive_endpoints(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(broker id, host, port, rack) of each unfenced broker on ``listener``: the brokers a
        Metadata response lists (Kafka leaves fenced brokers out)."""
        key = ("alive", listener)
        cached = self._cache.get(key)
        if cached is None:
            cached = []
            for broker_id in sorted(self.brokers):
                broker = self.brokers[broker_id]
                endpoint = broker.endpoint(listener)
                if endpoint is not None and not broker.fenced:
                    cached.append((broker_id, endpoint.host, endpoint.port, broker.rack))
            self._cache[key] = cached
        return list(cached)

    # ------------------------------------------------------------ topics

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics.get(topic_id)

    def partition(self, topic: str, index: int) -> PartitionRegistration | None:
        image = self.topic(topic)
        return None if image is None else image.partitions.get(index)

    def leader_endpoint(self, topic: str, index: int, listener: str) -> tuple[int, str, int] | None:
        """(leader id, host, port) of a partition's leader on ``listener``, or None if it has none
        (leaderless, unknown partition, or a leader without that listener)."""
        partition = self.partition(topic, index)
        if partition is None or partition.leader == NO_LEADER:
            return None
        broker = self.brokers.get(partition.leader)
        endpoint = None if broker is None else broker.endpoint(listener)
        return None if endpoint is None else (partition.leader, endpoint.host, endpoint.port)

    def partitions_with_replica(
        self, broker_id: int
    ) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition ``broker_id`` holds a replica of, as (topic, index, partition)."""
        for topic in self.topics.values():
            for index, partition in topic.partitions.items():
                if broker_id in partition.replicas:
                    yield topic, index, partition

    def led_by(self, broker_id: int) -> list[tuple[str, int]]:
        """The (topic, partition) pairs ``broker_id`` leads."""
        return [
            (topic.name, index)
            for topic, index, partition in self.partitions_with_replica(broker_id)
            if partition.leader == broker_id
        ]

    def followed_by(self, broker_id: int) -> list[tuple[str, int]]:
        """The (topic, partition) pairs ``broker_id`` holds a replica of without leading them."""
        return [
            (topic.name, index)
            for topic, index, partition in self.partitions_with_replica(broker_id)
            if partition.leader != broker_id
        ]

    # ------------------------------------------------------------ configs and quotas

    def config(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.configs.get((resource_type, name), _EMPTY)

    def topic_config(self, topic: str) -> Mapping[str, str]:
        return self.configs.get((RESOURCE_TOPIC, topic), _EMPTY)

    def quotas(self, entity: QuotaEntity) -> Mapping[str, float]:
        return self.client_quotas.get(entity, _EMPTY)

    # ------------------------------------------------------------ security

    def acl_id(self, binding: AclBinding) -> uuid.UUID | None:
        """The id of ``binding`` if the image has it."""
        ids = self._cache.get("acl_ids")
        if ids is None:
            ids = self._cache["acl_ids"] = {acl: acl_id for acl_id, acl in self.acls.items()}
        return ids.get(binding)


MetadataImage.EMPTY = MetadataImage()
