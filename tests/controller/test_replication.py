"""AlterPartition, ElectLeaders, unclean election, the leader rebalance, producer-id blocks, client
quotas, and what a controller keeps when it loses leadership."""

from __future__ import annotations

import random
import uuid

import pytest
from tests.controller.harness import (
    CLUSTER,
    Batch,
    FakeLog,
    allocate_producer_ids,
    alter_configs,
    alter_partition,
    alter_quotas,
    controller,
    create_topics,
    create_topics_request,
    elect,
    heartbeat,
    live_cluster,
    register,
    run,
)

from onceflow.controller.config import ControllerConfig
from onceflow.controller.quorum_controller import QuorumController, replay_all
from onceflow.metadata.records import NO_LEADER, RECOVERING, RESOURCE_TOPIC, FeatureLevelRecord, NoOpRecord
from onceflow.protocol.errors import ErrorCode

PREFERRED, UNCLEAN = 0, 1


def _partition_error(response):
    return response.topics[0].partitions[0].error_code


def test_alter_partition_shrinks_and_expands_the_isr():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", {0: [1, 2, 3]}))
    response = alter_partition(ctl, log, "t", 0, [1, 2])
    answer = response.topics[0].partitions[0]
    assert (answer.error_code, answer.leader_id, answer.isr, answer.leader_epoch, answer.partition_epoch) == (
        0,
        1,
        [1, 2],
        0,
        1,
    )
    partition = ctl.image.partition("t", 0)
    assert (partition.isr, partition.leader_epoch, partition.partition_epoch) == ((1, 2), 0, 1)
    alter_partition(ctl, log, "t", 0, [1, 2, 3])
    assert ctl.image.partition("t", 0).isr == (1, 2, 3)
    # the same ISR again changes nothing and answers the current state
    before = log.end_offset
    assert _partition_error(alter_partition(ctl, log, "t", 0, [1, 2, 3])) == 0
    assert log.end_offset == before


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"partition_epoch": 0, "isr": [1]}, ErrorCode.INVALID_UPDATE_VERSION),
        ({"leader_epoch": -1, "isr": [1]}, ErrorCode.FENCED_LEADER_EPOCH),
        ({"leader_epoch": 5, "isr": [1]}, ErrorCode.NOT_CONTROLLER),
        ({"partition_epoch": 9, "isr": [1]}, ErrorCode.NOT_CONTROLLER),
        ({"leader": 2, "isr": [1, 2]}, ErrorCode.INVALID_REQUEST),
        ({"isr": [2, 3]}, ErrorCode.INVALID_REQUEST),
        ({"isr": [1, 1]}, ErrorCode.INVALID_REQUEST),
        ({"isr": [1, 4]}, ErrorCode.INVALID_REQUEST),
        ({"isr": [1, 3]}, ErrorCode.INELIGIBLE_REPLICA),
        ({"isr": [1, 3], "version": 1}, ErrorCode.OPERATION_NOT_ATTEMPTED),
        ({"isr": [1, 2], "epochs": {2: 999}}, ErrorCode.INELIGIBLE_REPLICA),
    ],
)
def test_alter_partition_errors(kwargs, code):
    ctl, log = live_cluster(4)
    create_topics(ctl, log, ("t", {0: [1, 2, 3]}))
    alter_partition(ctl, log, "t", 0, [1, 2, 3])  # partition epoch 0 -> nothing; stays 0
    alter_partition(ctl, log, "t", 0, [1, 2])  # partition epoch 1
    heartbeat(ctl, log, 3, want_fence=True)  # 3 is fenced: not eligible for the ISR
    before = ctl.image.partition("t", 0)
    isr = kwargs.pop("isr")
    assert _partition_error(alter_partition(ctl, log, "t", 0, isr, **kwargs)) == code
    assert ctl.image.partition("t", 0) == before


def test_alter_partition_unknown_topic_partition_and_stale_broker_epoch():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2]}))
    stale = alter_partition(ctl, log, "t", 0, [1], broker_epoch=12345)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    from onceflow.protocol.messages import AlterPartitionRequest as R

    unknown_id = R(
        broker_id=1,
        broker_epoch=ctl.image.broker(1).epoch,
        topics=[
            R.TopicData(
                topic_name="x",
                topic_id=uuid.UUID(int=3),
                partitions=[
                    R.TopicData.PartitionData(
                        partition_index=0, leader_epoch=0, partition_epoch=0, new_isr_with_epochs=[]
                    )
                ],
            )
        ],
    )
    response = run(ctl, log, ctl.alter_partition(unknown_id, 0, version=3))
    assert _partition_error(response) == ErrorCode.UNKNOWN_TOPIC_ID
    response = run(ctl, log, ctl.alter_partition(unknown_id, 0, version=1))
    assert _partition_error(response) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    unknown_id.topics[0].topic_id = ctl.image.topic("t").id
    unknown_id.topics[0].partitions[0].partition_index = 7
    assert (
        _partition_error(run(ctl, log, ctl.alter_partition(unknown_id, 0, version=3)))
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_preferred_leader_election():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2], 1: [2, 1]}))
    heartbeat(ctl, log, 1, want_fence=True)
    assert ctl.image.partition("t", 0).leader == 2
    assert (
        elect(ctl, log, PREFERRED, {"t": [0]}).replica_election_results[0].partition_result[0].error_code
        == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    heartbeat(ctl, log, 1)  # unfenced, but not back in the ISR until the leader adds it
    assert _partition_error(alter_partition(ctl, log, "t", 0, [2, 1])) == 0
    response = elect(ctl, log, PREFERRED, {"t": [0, 1, 5]})
    codes = [r.error_code for r in response.replica_election_results[0].partition_result]
    assert codes == [0, ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    partition = ctl.image.partition("t", 0)
    assert (partition.leader, partition.leader_epoch) == (1, 2)
    # every partition: those already led by their preferred replica are left out
    assert elect(ctl, log, PREFERRED).replica_election_results[0].partition_result == []


def test_unclean_election_on_request_and_by_topic_config():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2]}), ("u", {0: [1, 2]}))
    alter_partition(ctl, log, "t", 0, [1])
    alter_partition(ctl, log, "u", 0, [1])
    heartbeat(ctl, log, 1, want_fence=True)
    assert ctl.image.partition("t", 0).leader == NO_LEADER
    assert (
        elect(ctl, log, PREFERRED, {"t": [0]}).replica_election_results[0].partition_result[0].error_code
        == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    response = elect(ctl, log, UNCLEAN, {"t": [0]})
    assert response.replica_election_results[0].partition_result[0].error_code == 0
    partition = ctl.image.partition("t", 0)
    assert (partition.leader, partition.isr, partition.leader_recovery_state) == (2, (2,), RECOVERING)
    assert (
        elect(ctl, log, UNCLEAN, {"t": [0]}).replica_election_results[0].partition_result[0].error_code
        == ErrorCode.ELECTION_NOT_NEEDED
    )
    # the leader reports it recovered with its AlterPartition
    assert _partition_error(alter_partition(ctl, log, "t", 0, [2])) == 0
    assert ctl.image.partition("t", 0).leader_recovery_state == 0
    # a topic allowing unclean election gets a leader from the periodic check
    alter_configs(ctl, log, RESOURCE_TOPIC, "u", ("unclean.leader.election.enable", 0, "true"))
    later = ctl.config.unclean_leader_election_interval_ms
    heartbeat(ctl, log, 2, now_ms=later)
    for result in ctl.poll(later):
        run(ctl, log, result)
    assert ctl.image.partition("u", 0).leader == 2


def test_no_eligible_leader_for_unclean_election():
    ctl, log = live_cluster(1)
    create_topics(ctl, log, ("t", {0: [1]}))
    heartbeat(ctl, log, 1, want_fence=True)
    response = elect(ctl, log, UNCLEAN, {"t": [0]})
    assert (
        response.replica_election_results[0].partition_result[0].error_code
        == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    )


def test_fencing_with_unclean_enabled_elects_outside_the_isr_at_once():
    config = ControllerConfig(
        cluster_id=CLUSTER, unclean_leader_election_enable=True, metadata_max_idle_interval_ms=0
    )
    ctl, log = live_cluster(2, config=config)
    create_topics(ctl, log, ("t", {0: [1, 2]}))
    alter_partition(ctl, log, "t", 0, [1])
    heartbeat(ctl, log, 1, want_fence=True)
    assert (ctl.image.partition("t", 0).leader, ctl.image.partition("t", 0).isr) == (2, (2,))


def test_auto_leader_rebalance_respects_the_imbalance_percentage():
    config = ControllerConfig(
        cluster_id=CLUSTER, leader_imbalance_per_broker_percentage=30, metadata_max_idle_interval_ms=0
    )
    ctl, log = live_cluster(2, config=config)
    create_topics(ctl, log, ("t", {i: [1, 2] for i in range(4)}))
    heartbeat(ctl, log, 1, want_fence=True)
    heartbeat(ctl, log, 1)
    for i in range(4):
        alter_partition(ctl, log, "t", i, [2, 1])
    assert all(p.leader == 2 for p in ctl.image.topic("t").partitions.values())
    interval = config.leader_imbalance_check_interval_seconds * 1000
    heartbeat(ctl, log, 1, now_ms=interval)
    heartbeat(ctl, log, 2, now_ms=interval)
    for result in ctl.poll(interval):
        run(ctl, log, result)
    assert all(p.leader == 1 for p in ctl.image.topic("t").partitions.values())
    # one of four misplaced (25%) is under the 30% threshold: left alone
    heartbeat(ctl, log, 1, now_ms=interval + 1, want_fence=True)
    heartbeat(ctl, log, 1, now_ms=interval + 2)
    for i in range(4):
        alter_partition(ctl, log, "t", i, [2, 1])
    elect(ctl, log, PREFERRED, {"t": [1, 2, 3]})
    assert [p.leader for p in ctl.image.topic("t").partitions.values()] == [2, 1, 1, 1]
    heartbeat(ctl, log, 1, now_ms=2 * interval)
    heartbeat(ctl, log, 2, now_ms=2 * interval)
    assert ctl.poll(2 * interval) == []


def test_producer_id_blocks_never_overlap_even_across_controllers():
    ctl, log = live_cluster(2)
    a = allocate_producer_ids(ctl, log, 1)
    b = allocate_producer_ids(ctl, log, 2)
    assert (a.producer_id_start, a.producer_id_len, b.producer_id_start) == (0, 1000, 1000)
    assert allocate_producer_ids(ctl, log, 1, epoch=555).error_code == ErrorCode.STALE_BROKER_EPOCH
    successor = QuorumController(
        ControllerConfig(node_id=2, cluster_id=CLUSTER, metadata_max_idle_interval_ms=0), random.Random(1)
    )
    for batch in log.batches:
        successor.handle_commit(batch)
    run(successor, log, successor.activate(2, log.end_offset, 0))
    assert allocate_producer_ids(successor, log, 1).producer_id_start == 2000


def test_client_quotas():
    ctl, log = live_cluster(1)
    response = alter_quotas(
        ctl, log, [("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0, False)]
    )
    assert response.entries[0].error_code == 0
    assert ctl.image.quotas((("client-id", None), ("user", "alice"))) == {"producer_byte_rate": 1024.0}
    alter_quotas(ctl, log, [("user", "alice"), ("client-id", None)], [("producer_byte_rate", 0.0, True)])
    assert ctl.image.client_quotas == {}
    for entity, ops in [
        ([("ip", "1.2.3.4"), ("user", "a")], [("connection_creation_rate", 5.0, False)]),
        ([("user", "a"), ("user", "b")], [("producer_byte_rate", 5.0, False)]),
        ([("group", "a")], [("producer_byte_rate", 5.0, False)]),
        ([("user", "a")], [("connection_creation_rate", 5.0, False)]),
        ([("user", "a")], [("producer_byte_rate", -1.0, False)]),
        ([("user", "a")], [("producer_byte_rate", 1.5, False)]),
    ]:
        assert alter_quotas(ctl, log, entity, ops).entries[0].error_code == ErrorCode.INVALID_REQUEST
    before = log.end_offset
    alter_quotas(ctl, log, [("ip", None)], [("connection_creation_rate", 10.0, False)], validate_only=True)
    assert log.end_offset == before


def test_activation_bootstraps_an_empty_log_once():
    ctl, log = controller()
    assert replay_all([b.records for b in log.batches]) == ctl.committed_image
    assert ctl.image.metadata_version == 14
    assert ctl.committed_image.features == {"metadata.version": 14}
    again = QuorumController(ControllerConfig(node_id=2, metadata_max_idle_interval_ms=0))
    for batch in log.batches:
        again.handle_commit(batch)
    assert again.activate(2, log.end_offset, 0).records == ()


def test_losing_leadership_drops_uncommitted_records():
    ctl, log = live_cluster(2)
    committed = ctl.committed_image
    # records appended but never committed (the quorum lost them)
    result = ctl.create_topics(create_topics_request(("t", 2, 2)), 0)
    log.append(result, ctl.epoch)
    assert ctl.image.topic("t") is not None and ctl.committed_image.topic("t") is None
    ctl.handle_leader_change(2, 2)
    assert (
        not ctl.active
        and ctl.image is committed
        and ctl.next_offset == committed_offset_plus_one(log, result)
    )
    log.truncate_after(ctl.committed_offset)
    # the new controller never saw them; the old one, now a follower, replays the new leader's log
    successor = QuorumController(
        ControllerConfig(node_id=2, cluster_id=CLUSTER, metadata_max_idle_interval_ms=0), random.Random(2)
    )
    for batch in log.batches:
        successor.handle_commit(batch)
    run(successor, log, successor.activate(2, log.end_offset, 0))
    create_topics(successor, log, ("u", 1, 1))
    ctl.handle_commit(log.batches[-1])
    assert ctl.committed_image == successor.committed_image
    assert ctl.image.topic("t") is None and ctl.image.topic("u") is not None


def committed_offset_plus_one(log: FakeLog, result) -> int:
    return result.wait_offset - len(result.records) + 1


def test_a_new_controller_gives_every_broker_a_fresh_session():
    ctl, log = live_cluster(2)
    successor = QuorumController(
        ControllerConfig(node_id=2, cluster_id=CLUSTER, metadata_max_idle_interval_ms=0)
    )
    for batch in log.batches:
        successor.handle_commit(batch)
    late = 10 * ctl.config.broker_session_timeout_ms
    run(successor, log, successor.activate(2, log.end_offset, late))
    assert successor.poll(late + 1) == []
    assert [r for res in successor.poll(late + ctl.config.broker_session_timeout_ms + 1) for r in res.records]


def test_noop_records_when_the_log_is_idle():
    config = ControllerConfig(cluster_id=CLUSTER, metadata_max_idle_interval_ms=500)
    ctl, log = controller(config)
    assert ctl.next_deadline_ms() == 500
    results = ctl.poll(500)
    assert [type(r) for res in results for r in res.records] == [NoOpRecord]
    for result in results:
        run(ctl, log, result)
    assert ctl.poll(700) == []
    register(ctl, log, 1, now_ms=900)  # a write resets the idle clock
    assert ctl.next_deadline_ms() <= 1400


def test_handle_commit_refuses_a_batch_it_did_not_write():
    ctl, log = controller()
    with pytest.raises(RuntimeError):
        ctl.handle_commit(Batch(5, 5, [FeatureLevelRecord(name="x", feature_level=1)]))


def test_a_snapshot_of_the_committed_image_loads_into_another_controller():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", 3, 2, {"retention.ms": "9"}))
    allocate_producer_ids(ctl, log, 1)
    offset, records = ctl.snapshot()
    assert offset == log.end_offset
    standby = QuorumController(ControllerConfig(node_id=2, metadata_max_idle_interval_ms=0))
    standby.handle_load_snapshot(type("Snapshot", (), {"offset": offset, "records": records})())
    assert standby.committed_image == ctl.committed_image and standby.next_offset == offset
