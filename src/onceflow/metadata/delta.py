"""Replaying records into an image, and what changed for one broker between two images.

:class:`MetadataDelta` is Kafka's ``MetadataDelta`` in our shape: it starts from an image, replays
records into copies of only the parts they touch (copy on first write), and :meth:`apply` freezes
the result into a new :class:`MetadataImage` that shares every untouched topic and map with the old
one. Replay checks what Kafka's controllers check when they replay (a change to an unknown partition,
a broker change with a stale epoch ...) and raises :class:`ReplayError`: such a record means a broken
log or a controller bug, never a client mistake.

:func:`local_changes` is Kafka's ``TopicsDelta.localChanges``: which partitions a broker must now lead,
follow or delete, computed by comparing the images before and after a batch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from onceflow.metadata.acls import AclBinding
from onceflow.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    QuotaEntity,
    ReplayError,
    ScramKey,
    TopicImage,
    frozen,
)
from onceflow.metadata.records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    NO_CHANGE,
    RESOURCE_TOPIC,
    UNFENCE,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from onceflow.metadata.scram import MECHANISMS_BY_ID, ScramCredential


def quota_entity(record: ClientQuotaRecord) -> QuotaEntity:
    """A quota record's entity in the image's canonical form: (type, name) pairs sorted by type."""
    return tuple(sorted((e.entity_type, e.entity_name) for e in record.entity))


class MetadataDelta:
    """Records replayed on top of ``image``; :meth:`apply` gives the new image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._features: dict[str, int] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[uuid.UUID, TopicImage] | None = None
        self._topic_ids: dict[str, uuid.UUID] | None = None
        # topic id -> its partitions, copied on the first change to that topic in this delta
        self._partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}
        self._configs: dict | None = None
        self._config_copied: set = set()
        self._quotas: dict | None = None
        self._quota_copied: set = set()
        self._next_producer_id = image.next_producer_id
        self._acls: dict[uuid.UUID, AclBinding] | None = None
        self._scram: dict[ScramKey, ScramCredential] | None = None
        self._handlers = {
            RegisterBrokerRecord: self._register_broker,
            UnregisterBrokerRecord: self._unregister_broker,
            FenceBrokerRecord: self._fence_broker,
            UnfenceBrokerRecord: self._unfence_broker,
            BrokerRegistrationChangeRecord: self._broker_change,
            TopicRecord: self._topic,
            PartitionRecord: self._partition,
            PartitionChangeRecord: self._partition_change,
            RemoveTopicRecord: self._remove_topic,
            ConfigRecord: self._config,
            FeatureLevelRecord: self._feature,
            ClientQuotaRecord: self._quota,
            ProducerIdsRecord: self._producer_ids,
            AccessControlEntryRecord: self._acl,
            RemoveAccessControlEntryRecord: self._remove_acl,
            UserScramCredentialRecord: self._scram_credential,
            RemoveUserScramCredentialRecord: self._remove_scram_credential,
            NoOpRecord: lambda record: None,
        }

    # ------------------------------------------------------------ copy on write

    def _brokers_w(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        return self._brokers

    def _topics_w(self) -> dict[uuid.UUID, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.image.topics)
            self._topic_ids = dict(self.image.topic_ids)
        return self._topics

    def _partitions_w(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        parts = self._partitions.get(topic_id)
        if parts is None:
            topic = self._topics_w().get(topic_id)
            if topic is None:
                raise ReplayError(f"no topic with id {topic_id}")
            parts = self._partitions[topic_id] = dict(topic.partitions)
        return parts

    def _resource_w(self, resource: tuple[int, str]) -> dict[str, str]:
        if self._configs is None:
            self._configs = dict(self.image.configs)
        if resource not in self._config_copied:
            self._configs[resource] = dict(self._configs.get(resource, {}))
            self._config_copied.add(resource)
        return self._configs[resource]

    # ------------------------------------------------------------ replay

    def replay(self, record: Any) -> None:
        handler = self._handlers.get(type(record))
        if handler is None:
            raise ReplayError(f"no replay for {type(record).__name__}")
        handler(record)

    def _broker(self, broker_id: int, epoch: int, record: Any) -> BrokerRegistration:
        broker = self._brokers_w().get(broker_id)
        if broker is None:
            raise ReplayError(f"{type(record).__name__}: broker {broker_id} is not registered")
        if broker.epoch != epoch:
            raise ReplayError(
                f"{type(record).__name__}: broker {broker_id} has epoch {broker.epoch}, not {epoch}"
            )
        return broker

    def _register_broker(self, record: RegisterBrokerRecord) -> None:
        self._brokers_w()[record.broker_id] = BrokerRegistration.from_record(record)

    def _unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._broker(record.broker_id, record.broker_epoch, record)
        del self._brokers_w()[record.broker_id]

    def _fence_broker(self, record: FenceBrokerRecord) -> None:
        broker = self._broker(record.id, record.epoch, record)
        self._brokers_w()[record.id] = replace(broker, fenced=True)

    def _unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        broker = self._broker(record.id, record.epoch, record)
        self._brokers_w()[record.id] = replace(broker, fenced=False)

    def _broker_change(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, record)
        fenced = {FENCE: True, UNFENCE: False, NO_CHANGE: broker.fenced}.get(record.fenced)
        if fenced is None:
            raise ReplayError(f"BrokerRegistrationChangeRecord has fenced={record.fenced}")
        shutting_down = {IN_CONTROLLED_SHUTDOWN: True, NO_CHANGE: broker.in_controlled_shutdown}.get(
            record.in_controlled_shutdown
        )
        if shutting_down is None:
            raise ReplayError(
                f"BrokerRegistrationChangeRecord has in_controlled_shutdown={record.in_controlled_shutdown}"
            )
        self._brokers_w()[record.broker_id] = replace(
            broker, fenced=fenced, in_controlled_shutdown=shutting_down
        )

    def _topic(self, record: TopicRecord) -> None:
        topics = self._topics_w()
        existing = self._topic_ids.get(record.name)
        if existing is not None:
            raise ReplayError(f"TopicRecord: topic {record.name!r} already exists with id {existing}")
        if record.topic_id in topics:
            raise ReplayError(
                f"TopicRecord: topic id {record.topic_id} is taken by {topics[record.topic_id].name!r}"
            )
        topics[record.topic_id] = TopicImage(record.name, record.topic_id)
        self._topic_ids[record.name] = record.topic_id
        self._partitions[record.topic_id] = {}

    def _partition(self, record: PartitionRecord) -> None:
        if not record.replicas or not record.isr:
            raise ReplayError(
                f"PartitionRecord for {record.topic_id}-{record.partition_id} has no replicas or ISR"
            )
        self._partitions_w(record.topic_id)[record.partition_id] = PartitionRegistration.from_record(record)

    def _partition_change(self, record: PartitionChangeRecord) -> None:
        parts = self._partitions_w(record.topic_id)
        current = parts.get(record.partition_id)
        if current is None:
            raise ReplayError(
                f"PartitionChangeRecord for unknown partition {record.topic_id}-{record.partition_id}"
            )
        parts[record.partition_id] = current.merge(record)

    def _remove_topic(self, record: RemoveTopicRecord) -> None:
        topics = self._topics_w()
        topic = topics.pop(record.topic_id, None)
        if topic is None:
            raise ReplayError(f"RemoveTopicRecord for unknown topic id {record.topic_id}")
        del self._topic_ids[topic.name]
        self._partitions.pop(record.topic_id, None)
        # Kafka forgets a deleted topic's configs with it.
        resource = (RESOURCE_TOPIC, topic.name)
        if resource in self.image.configs or (self._configs is not None and resource in self._configs):
            if self._configs is None:
                self._configs = dict(self.image.configs)
            self._configs.pop(resource, None)
            self._config_copied.discard(resource)

    def _config(self, record: ConfigRecord) -> None:
        resource = (record.resource_type, record.resource_name)
        configs = self._resource_w(resource)
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value

    def _feature(self, record: FeatureLevelRecord) -> None:
        if self._features is None:
            self._features = dict(self.image.features)
        if record.feature_level == 0:
            self._features.pop(record.name, None)
        else:
            self._features[record.name] = record.feature_level

    def _quota(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity(record)
        if self._quotas is None:
            self._quotas = dict(self.image.client_quotas)
        if entity not in self._quota_copied:
            self._quotas[entity] = dict(self._quotas.get(entity, {}))
            self._quota_copied.add(entity)
        if record.remove:
            self._quotas[entity].pop(record.key, None)
        else:
            self._quotas[entity][record.key] = record.value

    def _producer_ids(self, record: ProducerIdsRecord) -> None:
        if record.next_producer_id <= self._next_producer_id and self._next_producer_id > 0:
            raise ReplayError(
                f"ProducerIdsRecord moves the next producer id back: {self._next_producer_id} -> {record.next_producer_id}"
            )
        self._next_producer_id = record.next_producer_id

    def _acls_w(self) -> dict[uuid.UUID, AclBinding]:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        return self._acls

    def _acl(self, record: AccessControlEntryRecord) -> None:
        self._acls_w()[record.id] = AclBinding.from_record(record)

    def _remove_acl(self, record: RemoveAccessControlEntryRecord) -> None:
        if self._acls_w().pop(record.id, None) is None:
            raise ReplayError(f"RemoveAccessControlEntryRecord for unknown ACL id {record.id}")

    def _scram_key(self, record: Any) -> ScramKey:
        mechanism = MECHANISMS_BY_ID.get(record.mechanism)
        if mechanism is None:
            raise ReplayError(f"{type(record).__name__} has unknown SCRAM mechanism {record.mechanism}")
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        return record.name, mechanism

    def _scram_credential(self, record: UserScramCredentialRecord) -> None:
        key = self._scram_key(record)
        self._scram[key] = ScramCredential(
            bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), record.iterations
        )

    def _remove_scram_credential(self, record: RemoveUserScramCredentialRecord) -> None:
        key = self._scram_key(record)
        if self._scram.pop(key, None) is None:
            raise ReplayError(f"RemoveUserScramCredentialRecord for {key[0]} ({key[1]}), which has none")

    # ------------------------------------------------------------ the new image

    def apply(self) -> MetadataImage:
        image = self.image
        changes: dict[str, Any] = {}
        if self._features is not None:
            changes["features"] = frozen(self._features)
        if self._brokers is not None:
            changes["brokers"] = frozen(self._brokers)
        if self._topics is not None:
            topics = self._topics
            for topic_id, parts in self._partitions.items():
                topic = topics.get(topic_id)
                if topic is not None:
                    topics[topic_id] = TopicImage(topic.name, topic_id, frozen(dict(sorted(parts.items()))))
            changes["topics"] = frozen(dict(topics))
            changes["topic_ids"] = frozen(dict(self._topic_ids))
        if self._configs is not None:
            changes["configs"] = _freeze_nested(self._configs, self._config_copied)
        if self._quotas is not None:
            changes["client_quotas"] = _freeze_nested(self._quotas, self._quota_copied)
        if self._next_producer_id != image.next_producer_id:
            changes["next_producer_id"] = self._next_producer_id
        if self._acls is not None:
            changes["acls"] = frozen(self._acls)
        if self._scram is not None:
            changes["scram_credentials"] = frozen(self._scram)
        if not changes:
            return image
        return replace(image, _cache={}, **changes)


def _freeze_nested(outer: dict, copied: set) -> Any:
    """The outer map frozen, with the inner maps this delta copied frozen too and empty ones dropped."""
    result = {}
    for key, inner in outer.items():
        if key in copied:
            if inner:
                result[key] = frozen(dict(inner))
        else:
            result[key] = inner
    return frozen(result)


# ---------------------------------------------------------------- a broker's view of a change


@dataclass(frozen=True, slots=True)
class LocalPartition:
    topic: str
    topic_id: uuid.UUID
    index: int
    partition: PartitionRegistration


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a metadata change (Kafka's ``LocalReplicaChanges``).

    ``leaders``/``followers``: partitions it now leads / follows whose registration changed (new,
    or a new partition epoch); ``elected_leaders``: those of ``leaders`` with a new leader epoch (it
    just became leader, or was re-elected); ``deletes``: (topic, index) it no longer holds, because
    the topic was deleted or it left the replica set.
    """

    deletes: frozenset[tuple[str, int]]
    elected_leaders: dict[tuple[str, int], LocalPartition]
    leaders: dict[tuple[str, int], LocalPartition]
    followers: dict[tuple[str, int], LocalPartition]

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.leaders or self.followers)


def local_changes(before: MetadataImage, after: MetadataImage, broker_id: int) -> LocalReplicaChanges:
    """What changed for ``broker_id`` between two images (topics shared by both are skipped at once)."""
    deletes: set[tuple[str, int]] = set()
    elected: dict[tuple[str, int], LocalPartition] = {}
    leaders: dict[tuple[str, int], LocalPartition] = {}
    followers: dict[tuple[str, int], LocalPartition] = {}
    if before.topics is not after.topics:
        for topic_id, old in before.topics.items():
            if topic_id not in after.topics:
                deletes.update((old.name, i) for i, p in old.partitions.items() if broker_id in p.replicas)
        for topic_id, topic in after.topics.items():
            old = before.topics.get(topic_id)
            if old is topic:
                continue
            old_parts = old.partitions if old is not None else {}
            for index, partition in topic.partitions.items():
                prev = old_parts.get(index)
                key = (topic.name, index)
                if broker_id not in partition.replicas:
                    if prev is not None and broker_id in prev.replicas:
                        deletes.add(key)
                    continue
                if prev is not None and prev.partition_epoch == partition.partition_epoch:
                    continue
                local = LocalPartition(topic.name, topic_id, index, partition)
                if partition.leader == broker_id:
                    leaders[key] = local
                    if prev is None or prev.leader_epoch != partition.leader_epoch:
                        elected[key] = local
                else:
                    followers[key] = local
    return LocalReplicaChanges(frozenset(deletes), elected, leaders, followers)
