"""Random but valid sequences of metadata records, for property tests of replay and snapshots."""

from __future__ import annotations

import random
import uuid

from onceflow.metadata import records as r
from onceflow.metadata.image import MetadataImage


def random_records(rng: random.Random, count: int) -> list:
    """``count`` records that replay cleanly one after another from an empty image."""
    image = MetadataImage.EMPTY
    out: list = [r.FeatureLevelRecord(name="metadata.version", feature_level=14)]
    image = image.apply(out[0])
    epoch = 0
    while len(out) < count:
        record = _one(rng, image, epoch)
        if record is None:
            continue
        epoch += 1
        image = image.apply(record)
        out.append(record)
    return out


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def _one(rng: random.Random, image: MetadataImage, epoch: int):
    kind = rng.choice(
        [
            "register",
            "register",
            "unregister",
            "fence",
            "change",
            "topic",
            "topic",
            "partition",
            "partition",
            "partition_change",
            "partition_change",
            "partition_change",
            "remove_topic",
            "config",
            "feature",
            "quota",
            "producer_ids",
            "noop",
        ]
    )
    brokers = sorted(image.brokers)
    topics = sorted(image.topics, key=str)
    if kind == "register":
        broker_id = rng.randrange(6)
        endpoints = tuple(
            r.BrokerEndpoint(name=name, host=f"10.0.0.{broker_id}", port=9092 + i, security_protocol=i)
            for i, name in enumerate(rng.sample(["PLAINTEXT", "SSL", "INTERNAL"], rng.randint(0, 2)))
        )
        return r.RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=_uuid(rng),
            broker_epoch=epoch,
            end_points=endpoints,
            rack=rng.choice([None, "a", "b"]),
            fenced=rng.random() < 0.5,
            in_controlled_shutdown=rng.random() < 0.1,
        )
    if kind in ("unregister", "fence", "change") and brokers:
        broker = image.brokers[rng.choice(brokers)]
        if kind == "unregister":
            return r.UnregisterBrokerRecord(broker_id=broker.id, broker_epoch=broker.epoch)
        if kind == "fence":
            cls = rng.choice([r.FenceBrokerRecord, r.UnfenceBrokerRecord])
            return cls(id=broker.id, epoch=broker.epoch)
        return r.BrokerRegistrationChangeRecord(
            broker_id=broker.id,
            broker_epoch=broker.epoch,
            fenced=rng.choice([-1, 0, 1]),
            in_controlled_shutdown=rng.choice([0, 1]),
        )
    if kind == "topic":
        name = f"t{rng.randrange(20)}"
        if name in image.topic_ids:
            return None
        return r.TopicRecord(name=name, topic_id=_uuid(rng))
    if kind == "partition" and topics:
        topic = image.topics[rng.choice(topics)]
        replicas = tuple(rng.sample(range(6), rng.randint(1, 3)))
        return r.PartitionRecord(
            partition_id=len(topic.partitions),
            topic_id=topic.id,
            replicas=replicas,
            isr=replicas[: rng.randint(1, len(replicas))],
            leader=replicas[0],
            leader_epoch=0,
            partition_epoch=0,
        )
    if kind == "partition_change" and topics:
        topic = image.topics[rng.choice(topics)]
        if not topic.partitions:
            return None
        index = rng.choice(sorted(topic.partitions))
        current = topic.partitions[index]
        isr = tuple(rng.sample(current.replicas, rng.randint(1, len(current.replicas))))
        return r.PartitionChangeRecord(
            partition_id=index,
            topic_id=topic.id,
            isr=rng.choice([None, isr]),
            leader=rng.choice([r.NO_LEADER_CHANGE, r.NO_LEADER, isr[0]]),
            leader_recovery_state=rng.choice([-1, 0, 1]),
        )
    if kind == "remove_topic" and topics:
        return r.RemoveTopicRecord(topic_id=rng.choice(topics))
    if kind == "config":
        resource_type, name = rng.choice(
            [(r.RESOURCE_TOPIC, f"t{rng.randrange(20)}"), (r.RESOURCE_BROKER, ""), (r.RESOURCE_BROKER, "1")]
        )
        return r.ConfigRecord(
            resource_type=resource_type,
            resource_name=name,
            name=rng.choice(["retention.ms", "cleanup.policy", "min.insync.replicas"]),
            value=rng.choice([None, "1", "compact", "600000"]),
        )
    if kind == "feature":
        return r.FeatureLevelRecord(
            name=rng.choice(["group.version", "transaction.version"]), feature_level=rng.randint(0, 2)
        )
    if kind == "quota":
        parts = rng.choice(
            [[("user", "alice")], [("client-id", None)], [("user", None), ("client-id", "app")]]
        )
        return r.ClientQuotaRecord(
            entity=tuple(r.EntityData(entity_type=t, entity_name=n) for t, n in parts),
            key=rng.choice(["producer_byte_rate", "consumer_byte_rate"]),
            value=float(rng.randrange(1, 10**6)),
            remove=rng.random() < 0.3,
        )
    if kind == "producer_ids":
        return r.ProducerIdsRecord(
            broker_id=rng.randrange(6), broker_epoch=epoch, next_producer_id=image.next_producer_id + 1000
        )
    if kind == "noop":
        return r.NoOpRecord()
    return None
