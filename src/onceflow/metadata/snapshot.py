"""A metadata snapshot is the image written as records (KIP-630): replaying them from an empty image
gives the same image back.

The order is Kafka's ``MetadataImage.write``: features first (``metadata.version`` before anything,
since it says how to read the rest), then brokers, topics (each TopicRecord followed by its
PartitionRecords), configs, client quotas, the producer-id allocator, then users' SCRAM credentials
and the ACLs (by id).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.metadata.image import METADATA_VERSION, MetadataImage
from onceflow.metadata.records import (
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    ProducerIdsRecord,
    TopicRecord,
    from_bytes,
    to_bytes,
)


def image_records(image: MetadataImage) -> Iterator[Any]:
    """The records that rebuild ``image`` from nothing."""
    features = image.features
    if METADATA_VERSION in features:
        yield FeatureLevelRecord(name=METADATA_VERSION, feature_level=features[METADATA_VERSION])
    for name in sorted(features):
        if name != METADATA_VERSION:
            yield FeatureLevelRecord(name=name, feature_level=features[name])
    for broker_id in sorted(image.brokers):
        yield image.brokers[broker_id].to_record()
    for name in sorted(image.topic_ids):
        topic = image.topics[image.topic_ids[name]]
        yield TopicRecord(name=topic.name, topic_id=topic.id)
        for index in sorted(topic.partitions):
            yield topic.partitions[index].to_record(topic.id, index)
    for resource_type, resource_name in sorted(image.configs):
        configs = image.configs[(resource_type, resource_name)]
        for key in sorted(configs):
            yield ConfigRecord(
                resource_type=resource_type, resource_name=resource_name, name=key, value=configs[key]
            )
    for entity in sorted(image.client_quotas, key=_entity_sort_key):
        quotas = image.client_quotas[entity]
        parts = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
        for key in sorted(quotas):
            yield ClientQuotaRecord(entity=parts, key=key, value=quotas[key])
    if image.next_producer_id > 0:
        yield ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)
    for (user, mechanism), credential in sorted(image.scram_credentials.items()):
        yield credential.to_record(user, mechanism)
    for acl_id, acl in sorted(image.acls.items()):
        yield acl.to_record(acl_id)


def _entity_sort_key(entity):
    return tuple((t, "" if n is None else n, n is None) for t, n in entity)


def snapshot_bytes(image: MetadataImage) -> list[bytes]:
    """The snapshot as the framed record bytes a snapshot writer stores."""
    return [to_bytes(record) for record in image_records(image)]


def load_snapshot(records: Iterable[bytes | Any]) -> MetadataImage:
    """The image a snapshot (framed bytes, or records) describes."""
    decoded = (from_bytes(r) if isinstance(r, bytes | bytearray | memoryview) else r for r in records)
    return MetadataImage.EMPTY.apply_all(decoded)
