"""Every node of a cluster serves its own ``/metrics`` (three combined ``onceflow serve`` processes and
a broker-only one, one cluster for the module), read with ``prometheus_client``'s parser:

- exactly one node is the active controller, and it is the quorum leader every node names, in the
  epoch every node names; the leader reports each voter's and the observer's lag;
- every controller counts the brokers and the topics of the cluster; a broker-only node reports no
  controller metrics but the metadata it replayed;
- a topic's partitions are each reported (log, leadership) by the one broker that holds them, and
  records produced are counted by the broker that appended them;
- kill -9 of the active controller: another node becomes the active one, in a higher epoch.

Bounded: every wait has a deadline; every process is killed at the end, whatever failed.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from tests.helpers.broker import free_port
from tests.helpers.clients import create_topic
from tests.helpers.cluster import ClusterNodes
from tests.metrics.scrape import scrape

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(300)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")

ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
LEADER = "kafka_server_raft_metrics_current_leader"
EPOCH = "kafka_server_raft_metrics_current_epoch"
HIGH_WATERMARK = "kafka_server_raft_metrics_high_watermark"
LAG = "onceflow_raft_replica_lag"
TOPICS = "kafka_controller_kafkacontroller_globaltopiccount"
PARTITIONS = "kafka_controller_kafkacontroller_globalpartitioncount"
BROKERS = "kafka_controller_kafkacontroller_activebrokercount"
LEADER_COUNT = "kafka_server_replicamanager_leadercount"
DEADLINE_S = 60.0
OBSERVER = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = ClusterNodes(tmp_path_factory.mktemp("metrics-cluster"), 3)
    metrics_ports = {}
    for node_id, node in nodes.nodes.items():
        metrics_ports[node_id] = free_port()
        node.extra["metrics.port"] = str(metrics_ports[node_id])
    with nodes:
        metrics_ports[OBSERVER] = free_port()
        nodes.extra = {**nodes.extra, "metrics.port": str(metrics_ports[OBSERVER])}
        nodes.add_broker(OBSERVER)
        nodes.metrics_ports = metrics_ports
        yield nodes


def readings(cluster) -> dict:
    """node id -> a scrape of every node still running."""
    return {
        node_id: scrape(cluster.metrics_ports[node_id])
        for node_id, node in cluster.nodes.items()
        if node.running
    }


def wait_for(check, what: str, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as exc:  # a node just killed, or not serving yet
            last = exc
        else:
            if result:
                return result
            last = result
        time.sleep(0.2)
    raise AssertionError(f"{what} within {deadline_s}s (last: {last!r})")


def active_controller(cluster) -> tuple[int, dict]:
    """(the one node reporting itself active, the readings) once every node agrees on it."""

    def agreed():
        got = readings(cluster)
        active = [node_id for node_id, r in got.items() if r.value(ACTIVE) == 1]
        leaders = {r.value(LEADER) for r in got.values()}
        epochs = {r.value(EPOCH) for r in got.values()}
        if len(active) == 1 and leaders == {active[0]} and len(epochs) == 1:
            return active[0], got
        return None

    return wait_for(agreed, "one active controller that every node names")


def test_one_active_controller_leads_the_quorum_and_sees_every_replica(cluster):
    active, got = active_controller(cluster)
    controllers = [node_id for node_id in got if node_id != OBSERVER]
    assert sum(got[n].value(ACTIVE) for n in controllers) == 1
    assert got[active].value("onceflow_raft_state", state="leader") == 1
    for node_id in controllers:
        if node_id != active:
            assert got[node_id].value("onceflow_raft_state", state="follower") == 1
            assert not got[node_id].samples(LAG)  # only the leader knows the others' lag
    assert got[active].value(EPOCH) >= 1 and got[active].value(HIGH_WATERMARK) > 0

    def lag_of_everyone():
        r = scrape(cluster.metrics_ports[active])
        voters = {s.labels["replica"] for s in r.samples(LAG) if s.labels["role"] == "voter"}
        observers = {s.labels["replica"] for s in r.samples(LAG) if s.labels["role"] == "observer"}
        return voters == {"1", "2", "3"} and observers == {str(OBSERVER)} and r

    r = wait_for(lag_of_everyone, "the leader reports the lag of three voters and one observer")
    assert r.value(LAG, replica=str(active), role="voter") == 0
    assert all(s.value >= 0 for s in r.samples(LAG))


def test_the_controllers_count_the_cluster_and_a_broker_only_node_does_not(cluster):
    def four_brokers():
        got = readings(cluster)
        return all(got[n].value(BROKERS) == 4 for n in (1, 2, 3)) and got

    got = wait_for(four_brokers, "every controller counts four unfenced brokers")
    observer = got[OBSERVER]
    assert not observer.has(ACTIVE) and not observer.has(TOPICS)
    assert observer.value("onceflow_raft_state", state="follower") == 1  # observers follow
    assert observer.value("kafka_server_broker_metadata_metrics_last_applied_record_offset") > 0
    assert observer.value("kafka_server_kafkaserver_brokerstate") == 3
    assert observer.value("process_resident_memory_bytes") > 0


def test_a_topics_partitions_and_records_are_each_reported_by_their_broker(cluster):
    before = readings(cluster)
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=6)

    def counted():
        got = readings(cluster)
        topics = {got[n].value(TOPICS) for n in (1, 2, 3)}
        partitions = {got[n].value(PARTITIONS) for n in (1, 2, 3)}
        # Every partition of the cluster is led by exactly one broker: once each broker has
        # replayed the topic, the leaders add up to the controllers' count.
        leaders = sum(r.value(LEADER_COUNT) for r in got.values())
        return topics == {before[1].value(TOPICS) + 1} and partitions == {leaders} and got

    got = wait_for(counted, "the controllers count the new topic, and its leaders are on the brokers")
    holders = {
        int(s.labels["partition"]): node_id
        for node_id, r in got.items()
        for s in r.samples("kafka_log_log_logendoffset")
        if s.labels["topic"] == topic
    }
    assert sorted(holders) == list(range(6))
    assert len(set(holders.values())) > 1  # spread over the brokers

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(60):
        producer.produce(topic, b"v%d" % i, partition=i % 6)
    assert producer.flush(30) == 0
    got = readings(cluster)
    messages = "kafka_server_brokertopicmetrics_messagesin_total"
    assert sum(r.value(messages, topic=topic) for r in got.values()) == 60
    for index, node_id in holders.items():
        assert got[node_id].value("kafka_log_log_logendoffset", topic=topic, partition=str(index)) == 10
        assert got[node_id].value(messages, topic=topic) > 0


def test_killing_the_active_controller_moves_it_to_another_node_in_a_higher_epoch(cluster):
    killed, before = active_controller(cluster)
    epoch = before[killed].value(EPOCH)
    cluster.nodes[killed].kill9()
    successor, after = active_controller(cluster)
    assert successor not in (killed, OBSERVER)
    assert after[successor].value(EPOCH) > epoch
    assert after[successor].value(HIGH_WATERMARK) >= before[killed].value(HIGH_WATERMARK)
