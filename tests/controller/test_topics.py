"""CreateTopics, CreatePartitions, DeleteTopics and configs on the controller, with Kafka's errors."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from kafka.protocol.admin import DeleteTopicsRequest
from tests.controller.harness import (
    CLUSTER,
    alter_configs,
    create_partitions,
    create_topics,
    create_topics_request,
    delete_topics,
    heartbeat,
    live_cluster,
    run,
)

from onceflow.controller.config import ControllerConfig
from onceflow.controller.placement import StripedPlacer
from onceflow.metadata.records import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ConfigRecord,
    PartitionRecord,
    TopicRecord,
)
from onceflow.protocol.errors import ErrorCode


def _errors(response):
    return {t.name: t.error_code for t in response.topics}


def test_create_topic_spreads_replicas_and_leaders_over_the_live_brokers():
    ctl, log = live_cluster(3)
    response = create_topics(ctl, log, ("orders", 6, 2))
    result = response.topics[0]
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 6, 2)
    topic = ctl.image.topic("orders")
    assert topic.id == result.topic_id
    leaders = Counter(p.leader for p in topic.partitions.values())
    assert leaders == {1: 2, 2: 2, 3: 2}
    for p in topic.partitions.values():
        assert len(set(p.replicas)) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def test_create_topic_writes_topic_configs_then_partitions():
    ctl, log = live_cluster(1)
    result = ctl.create_topics(create_topics_request(("t", 2, 1, {"retention.ms": "100"})), 0)
    assert [type(r) for r in result.records] == [TopicRecord, ConfigRecord, PartitionRecord, PartitionRecord]
    run(ctl, log, result)
    assert ctl.image.topic_config("t") == {"retention.ms": "100"}
    assert result.response.topics[0].configs[0].name == "retention.ms"


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (("big", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR),
        (("zero", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (("neg", -5, 1), ErrorCode.INVALID_PARTITIONS),
        (("none", 0, 1), ErrorCode.INVALID_PARTITIONS),
        (("bad name!", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("..", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("x" * 250, 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (("manual", {0: [1, 9]}), ErrorCode.INVALID_REPLICATION_ASSIGNMENT),
        (("twice", {0: [1, 1]}), ErrorCode.INVALID_REPLICATION_ASSIGNMENT),
        (("uneven", {0: [1, 2], 1: [1]}), ErrorCode.INVALID_REPLICATION_ASSIGNMENT),
        (("gap", {0: [1], 2: [2]}), ErrorCode.INVALID_REPLICATION_ASSIGNMENT),
        (("nullcfg", 1, 1, {"retention.ms": None}), ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topic_errors(topic, code):
    ctl, log = live_cluster(3)
    before = log.end_offset
    response = create_topics(ctl, log, topic, check=False)
    assert response.topics[0].error_code == code
    assert response.topics[0].error_message
    assert log.end_offset == before


def test_replication_factor_counts_only_active_brokers():
    ctl, log = live_cluster(3)
    heartbeat(ctl, log, 3, want_fence=True)
    assert _errors(create_topics(ctl, log, ("t", 1, 3), check=False)) == {
        "t": ErrorCode.INVALID_REPLICATION_FACTOR
    }
    create_topics(ctl, log, ("t", 4, 2))
    assert all(3 not in p.replicas for p in ctl.image.topic("t").partitions.values())


def test_existing_colliding_and_duplicate_names():
    ctl, log = live_cluster(1)
    create_topics(ctl, log, ("a.b", 1, 1))
    response = create_topics(
        ctl, log, ("a.b", 1, 1), ("a_b", 1, 1), ("dup", 1, 1), ("dup", 1, 1), ("ok", 1, 1), check=False
    )
    assert [t.error_code for t in response.topics] == [
        ErrorCode.TOPIC_ALREADY_EXISTS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        0,
    ]
    assert ctl.image.topic("ok") is not None and ctl.image.topic("dup") is None


def test_validate_only_answers_and_writes_nothing():
    ctl, log = live_cluster(2)
    before = log.end_offset
    response = create_topics(ctl, log, ("t", 3, 2), validate_only=True)
    assert response.topics[0].error_code == 0 and response.topics[0].num_partitions == 3
    assert log.end_offset == before and ctl.image.topic("t") is None


def test_defaults_come_from_the_controller_config():
    config = ControllerConfig(
        cluster_id=CLUSTER, num_partitions=4, default_replication_factor=2, metadata_max_idle_interval_ms=0
    )
    ctl, log = live_cluster(2, config=config)
    result = create_topics(ctl, log, ("t", -1, -1)).topics[0]
    assert (result.num_partitions, result.replication_factor) == (4, 2)


def test_manual_assignment_isr_is_its_active_brokers():
    ctl, log = live_cluster(3)
    heartbeat(ctl, log, 2, want_fence=True)
    create_topics(ctl, log, ("t", {0: [2, 1], 1: [3, 2]}))
    p0, p1 = ctl.image.partition("t", 0), ctl.image.partition("t", 1)
    assert (p0.replicas, p0.isr, p0.leader) == ((2, 1), (1,), 1)
    assert (p1.isr, p1.leader) == ((3,), 3)
    response = create_topics(ctl, log, ("u", {0: [2]}), check=False)
    assert response.topics[0].error_code == ErrorCode.INVALID_REPLICATION_ASSIGNMENT


def test_create_partitions():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", 2, 2))
    assert create_partitions(ctl, log, "t", 5).results[0].error_code == 0
    topic = ctl.image.topic("t")
    assert sorted(topic.partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 for p in topic.partitions.values())
    assert create_partitions(ctl, log, "t", 5).results[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert create_partitions(ctl, log, "t", 3).results[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert (
        create_partitions(ctl, log, "nope", 3).results[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert (
        create_partitions(ctl, log, "t", 7, assignments=[[1, 2]]).results[0].error_code
        == ErrorCode.INVALID_REPLICATION_ASSIGNMENT
    )
    assert create_partitions(ctl, log, "t", 6, assignments=[[3, 1]]).results[0].error_code == 0
    assert ctl.image.partition("t", 5).replicas == (3, 1)
    before = log.end_offset
    assert create_partitions(ctl, log, "t", 9, validate_only=True).results[0].error_code == 0
    assert log.end_offset == before


def test_delete_topics_by_name_and_by_id():
    ctl, log = live_cluster(1)
    create_topics(ctl, log, ("a", 1, 1), ("b", 1, 1, {"retention.ms": "5"}))
    response = delete_topics(ctl, log, "a", "missing")
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("a", 0),
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert ctl.image.topic("a") is None
    b_id = ctl.image.topic("b").id
    S = DeleteTopicsRequest.DeleteTopicState
    request = DeleteTopicsRequest(
        topics=[S(name=None, topic_id=b_id), S(name=None, topic_id=uuid.UUID(int=5))], timeout_ms=1
    )
    response = run(ctl, log, ctl.delete_topics(request, 0, version=6))
    assert [r.error_code for r in response.responses] == [0, ErrorCode.UNKNOWN_TOPIC_ID]
    assert ctl.image.topic("b") is None and ctl.image.topic_config("b") == {}
    # the name can be used again, with a new id
    create_topics(ctl, log, ("b", 1, 1))
    assert ctl.image.topic("b").id != b_id


def test_incremental_alter_configs():
    ctl, log = live_cluster(1)
    create_topics(ctl, log, ("t", 1, 1))
    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
    response = alter_configs(
        ctl, log, RESOURCE_TOPIC, "t", ("retention.ms", SET, "10"), ("cleanup.policy", APPEND, "compact")
    )
    assert response.responses[0].error_code == 0
    assert ctl.image.topic_config("t") == {"retention.ms": "10", "cleanup.policy": "compact"}
    alter_configs(
        ctl, log, RESOURCE_TOPIC, "t", ("cleanup.policy", APPEND, "delete"), ("retention.ms", DELETE, None)
    )
    assert ctl.image.topic_config("t") == {"cleanup.policy": "compact,delete"}
    alter_configs(ctl, log, RESOURCE_TOPIC, "t", ("cleanup.policy", SUBTRACT, "compact"))
    assert ctl.image.topic_config("t") == {"cleanup.policy": "delete"}
    bad = alter_configs(ctl, log, RESOURCE_TOPIC, "t", ("retention.ms", APPEND, "1"))
    assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG
    missing = alter_configs(ctl, log, RESOURCE_TOPIC, "nope", ("retention.ms", SET, "1"))
    assert missing.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a broker key is written even when unchanged (brokers reload it), at the cluster default resource
    alter_configs(ctl, log, RESOURCE_BROKER, "", ("log.retention.ms", SET, "1"))
    before = log.end_offset
    alter_configs(ctl, log, RESOURCE_BROKER, "", ("log.retention.ms", SET, "1"))
    assert log.end_offset == before + 1
    assert (
        alter_configs(ctl, log, RESOURCE_BROKER, "x", ("a", SET, "1")).responses[0].error_code
        == ErrorCode.INVALID_REQUEST
    )
    before = log.end_offset
    alter_configs(ctl, log, RESOURCE_TOPIC, "t", ("retention.ms", SET, "3"), validate_only=True)
    assert log.end_offset == before and "retention.ms" not in ctl.image.topic_config("t")


def test_the_config_validator_can_refuse_values():
    def validator(resource_type, name, configs):
        return "retention.ms must be a number" if not configs.get("retention.ms", "0").isdigit() else None

    config = ControllerConfig(cluster_id=CLUSTER, config_validator=validator, metadata_max_idle_interval_ms=0)
    ctl, log = live_cluster(1, config=config)
    response = create_topics(ctl, log, ("t", 1, 1, {"retention.ms": "soon"}), check=False)
    assert response.topics[0].error_code == ErrorCode.INVALID_CONFIG
    create_topics(ctl, log, ("t", 1, 1))
    response = alter_configs(ctl, log, RESOURCE_TOPIC, "t", ("retention.ms", 0, "later"))
    assert (response.responses[0].error_code, response.responses[0].error_message) == (
        ErrorCode.INVALID_CONFIG,
        "retention.ms must be a number",
    )


def test_striped_placement_over_racks():
    placer = StripedPlacer([(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")], random.Random(3))
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placements = placer.place_all(12, 3)
    for replicas in placements:
        assert len({racks[b] for b in replicas}) == 3  # one replica per rack
    assert Counter(r[0] for r in placements) == {b: 2 for b in range(1, 7)}  # leaders spread evenly
