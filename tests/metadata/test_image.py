"""The metadata image: replay rules, what a broker reads from it, snapshots and local changes."""

from __future__ import annotations

import random
import uuid

import pytest
from tests.metadata.record_sequences import random_records

from onceflow.metadata import records as r
from onceflow.metadata.delta import local_changes
from onceflow.metadata.image import MetadataImage, PartitionRegistration, ReplayError
from onceflow.metadata.snapshot import image_records, load_snapshot, snapshot_bytes

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _endpoint(broker_id: int, listener: str = "PLAINTEXT") -> r.BrokerEndpoint:
    return r.BrokerEndpoint(name=listener, host=f"127.0.0.{broker_id}", port=9092, security_protocol=0)


def _register(broker_id: int, epoch: int, fenced: bool = False) -> r.RegisterBrokerRecord:
    return r.RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=100 + broker_id),
        broker_epoch=epoch,
        end_points=(_endpoint(broker_id),),
        fenced=fenced,
    )


def _cluster() -> MetadataImage:
    return MetadataImage.EMPTY.apply_all(
        [
            r.FeatureLevelRecord(name="metadata.version", feature_level=14),
            _register(1, 10),
            _register(2, 11),
            _register(3, 12, fenced=True),
            r.TopicRecord(name="orders", topic_id=T1),
            r.PartitionRecord(
                partition_id=0,
                topic_id=T1,
                replicas=(1, 2),
                isr=(1, 2),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
            ),
            r.PartitionRecord(
                partition_id=1,
                topic_id=T1,
                replicas=(2, 3),
                isr=(2,),
                leader=2,
                leader_epoch=0,
                partition_epoch=0,
            ),
        ]
    )


def test_a_broker_reads_leaders_endpoints_and_its_own_partitions():
    image = _cluster()
    assert image.metadata_version == 14
    assert image.leader_endpoint("orders", 0, "PLAINTEXT") == (1, "127.0.0.1", 9092)
    assert image.leader_endpoint("orders", 0, "SSL") is None
    assert image.leader_endpoint("orders", 9, "PLAINTEXT") is None
    # fenced brokers are not advertised
    assert [e[0] for e in image.alive_endpoints("PLAINTEXT")] == [1, 2]
    assert image.led_by(2) == [("orders", 1)]
    assert image.followed_by(2) == [("orders", 0)]
    assert image.is_active(1) and not image.is_active(3) and not image.is_active(9)


def test_partition_change_bumps_leader_epoch_only_when_the_leader_is_set():
    image = _cluster()
    isr_only = image.apply(r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,)))
    assert isr_only.partition("orders", 0) == PartitionRegistration(
        replicas=(1, 2), isr=(1,), leader=1, leader_epoch=0, partition_epoch=1
    )
    same_leader = isr_only.apply(r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=1))
    assert (
        same_leader.partition("orders", 0).leader_epoch,
        same_leader.partition("orders", 0).partition_epoch,
    ) == (1, 2)
    leaderless = same_leader.apply(r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=r.NO_LEADER))
    assert not leaderless.partition("orders", 0).has_leader


def test_images_are_immutable_and_share_what_did_not_change():
    before = _cluster()
    before_records = list(image_records(before))
    after = before.apply(r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,)))
    assert list(image_records(before)) == before_records
    assert after.brokers is before.brokers
    with pytest.raises(TypeError):
        after.topics[T2] = None  # type: ignore[index]
    unrelated = after.apply(r.TopicRecord(name="other", topic_id=T2))
    assert unrelated.topics[T1] is after.topics[T1]


def test_removing_a_topic_forgets_its_configs():
    image = _cluster().apply_all(
        [
            r.ConfigRecord(
                resource_type=r.RESOURCE_TOPIC, resource_name="orders", name="retention.ms", value="1"
            ),
            r.ConfigRecord(resource_type=r.RESOURCE_BROKER, resource_name="", name="x", value="y"),
        ]
    )
    assert image.topic_config("orders") == {"retention.ms": "1"}
    removed = image.apply(r.RemoveTopicRecord(topic_id=T1))
    assert removed.topic("orders") is None and removed.topic_config("orders") == {}
    assert removed.config(r.RESOURCE_BROKER, "") == {"x": "y"}
    # a config set to null disappears, and an empty resource with it
    cleared = removed.apply(
        r.ConfigRecord(resource_type=r.RESOURCE_BROKER, resource_name="", name="x", value=None)
    )
    assert (r.RESOURCE_BROKER, "") not in cleared.configs


def test_broker_changes_check_the_broker_epoch():
    image = _cluster()
    fenced = image.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=r.FENCE))
    assert fenced.brokers[1].fenced
    shutting = image.apply(
        r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=11, in_controlled_shutdown=1)
    )
    assert shutting.brokers[2].in_controlled_shutdown and not shutting.is_active(2)
    with pytest.raises(ReplayError, match="epoch"):
        image.apply(r.FenceBrokerRecord(id=1, epoch=9))
    with pytest.raises(ReplayError, match="not registered"):
        image.apply(r.UnregisterBrokerRecord(broker_id=7, broker_epoch=1))
    assert 1 not in image.apply(r.UnregisterBrokerRecord(broker_id=1, broker_epoch=10)).brokers


@pytest.mark.parametrize(
    "record",
    [
        r.TopicRecord(name="orders", topic_id=T2),
        r.PartitionRecord(partition_id=0, topic_id=T2, replicas=(1,), isr=(1,), leader=1),
        r.PartitionChangeRecord(partition_id=5, topic_id=T1, leader=1),
        r.RemoveTopicRecord(topic_id=T2),
        r.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=0),
    ],
)
def test_records_that_cannot_apply_are_replay_errors(record):
    image = _cluster().apply(r.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000))
    with pytest.raises(ReplayError):
        image.apply(record)


def test_client_quotas_and_producer_ids():
    entity = (
        r.EntityData(entity_type="user", entity_name="alice"),
        r.EntityData(entity_type="client-id", entity_name=None),
    )
    image = MetadataImage.EMPTY.apply_all(
        [
            r.ClientQuotaRecord(entity=entity, key="producer_byte_rate", value=1024.0),
            r.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=1000),
            r.ProducerIdsRecord(broker_id=2, broker_epoch=1, next_producer_id=2000),
        ]
    )
    assert image.quotas((("client-id", None), ("user", "alice"))) == {"producer_byte_rate": 1024.0}
    assert image.next_producer_id == 2000
    removed = image.apply(r.ClientQuotaRecord(entity=entity, key="producer_byte_rate", remove=True))
    assert removed.client_quotas == {}


@pytest.mark.parametrize("seed", range(40))
def test_a_snapshot_replays_into_the_same_image(seed):
    records = random_records(random.Random(seed), 120)
    image = MetadataImage.EMPTY.apply_all(records)
    one_by_one = MetadataImage.EMPTY
    for record in records:
        one_by_one = one_by_one.apply(record)
    assert one_by_one == image
    assert load_snapshot(snapshot_bytes(image)) == image
    # a snapshot of the reloaded image is the same bytes
    assert snapshot_bytes(load_snapshot(snapshot_bytes(image))) == snapshot_bytes(image)


def _brute_force_local(before: MetadataImage, after: MetadataImage, broker_id: int):
    def view(image):
        return {
            (t.name, t.id, i): p
            for t in image.topics.values()
            for i, p in t.partitions.items()
            if broker_id in p.replicas
        }

    old, new = view(before), view(after)
    deletes = {(name, i) for (name, tid, i) in old if (name, tid, i) not in new}
    changed = {k: p for k, p in new.items() if k not in old or old[k].partition_epoch != p.partition_epoch}
    leaders = {(k[0], k[2]) for k, p in changed.items() if p.leader == broker_id}
    followers = {(k[0], k[2]) for k, p in changed.items() if p.leader != broker_id}
    elected = {
        (k[0], k[2])
        for k, p in changed.items()
        if p.leader == broker_id and (k not in old or old[k].leader_epoch != p.leader_epoch)
    }
    # a topic deleted and recreated under the same name counts as a delete and a new partition
    return deletes - leaders - followers, leaders, followers, elected


@pytest.mark.parametrize("seed", range(30))
def test_local_changes_match_a_brute_force_comparison(seed):
    rng = random.Random(seed)
    records = random_records(rng, 150)
    cut = rng.randrange(20, 140)
    before = MetadataImage.EMPTY.apply_all(records[:cut])
    after = before.apply_all(records[cut:])
    for broker_id in range(6):
        changes = local_changes(before, after, broker_id)
        deletes, leaders, followers, elected = _brute_force_local(before, after, broker_id)
        assert set(changes.leaders) == leaders
        assert set(changes.followers) == followers
        assert set(changes.elected_leaders) == elected
        assert changes.deletes - leaders - followers == deletes
