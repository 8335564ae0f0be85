"""A controller-only node and a broker-only node (Kafka's isolated mode), each with its own
``/metrics``: the controller reports the cluster and the quorum it leads, with the broker as an
observer, and nothing of a broker (no requests, no partitions); the broker reports no controller."""

from __future__ import annotations

import time

import pytest
from tests.helpers.broker import LOOPBACK, free_port
from tests.helpers.cluster import NodeProcess
from tests.metrics.scrape import scrape

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(180)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")


class ControllerOnly(NodeProcess):
    def settings(self) -> dict[str, str]:
        return {**super().settings(), "listeners": f"CONTROLLER://{LOOPBACK}:{self.controller_port}"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("isolated")
    controller_port = free_port()
    voters = f"1@{LOOPBACK}:{controller_port}"
    ports = {1: free_port(), 2: free_port()}
    controller = ControllerOnly(
        root / "controller",
        1,
        free_port(),
        controller_port,
        voters,
        roles="controller",
        extra={"metrics.port": str(ports[1])},
    )
    broker = NodeProcess(
        root / "broker", 2, free_port(), None, voters, roles="broker", extra={"metrics.port": str(ports[2])}
    )
    try:
        controller.start(60)
        broker.start(60)
        yield ports
    finally:
        broker.stop(timeout=40)
        controller.stop(timeout=40)
        broker.kill9()
        controller.kill9()


def test_the_controller_reports_the_cluster_and_the_quorum_only(nodes):
    deadline = time.monotonic() + 30
    while True:  # the broker's first fetch as an observer may come after its start
        reading = scrape(nodes[1])
        if (
            reading.has("onceflow_raft_replica_lag", replica="2", role="observer")
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.2)
    assert reading.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert reading.value("kafka_controller_kafkacontroller_activebrokercount") == 1
    assert reading.value("kafka_server_raft_metrics_current_leader") == 1
    assert reading.value("onceflow_raft_state", state="leader") == 1
    assert reading.has("onceflow_raft_replica_lag", replica="2", role="observer")
    committed = reading.value("kafka_controller_kafkacontroller_lastcommittedrecordoffset")
    assert committed > 0 and reading.value("kafka_server_raft_metrics_high_watermark") == committed + 1
    # Nothing of a broker: no requests, partitions, broker state or client connections.
    for family in reading.families:
        assert not family.startswith(("kafka_network_requestmetrics", "kafka_server_replicamanager"))
    assert not reading.has("kafka_server_kafkaserver_brokerstate")
    assert reading.value("process_resident_memory_bytes") > 0


def test_the_broker_reports_no_controller(nodes):
    reading = scrape(nodes[2])
    assert not reading.has("kafka_controller_kafkacontroller_activecontrollercount")
    assert reading.value("kafka_server_kafkaserver_brokerstate") == 3
    assert reading.value("kafka_server_raft_metrics_current_leader") == 1
    assert reading.value("kafka_server_replicamanager_partitioncount") == 0
