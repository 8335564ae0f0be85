"""Security on a cluster: two combined nodes, each with a SASL_SSL client listener (PLAIN users from
its JAAS setting) beside the PLAINTEXT inter-broker and controller listeners.

- confluent-kafka (librdkafka) and our client bootstrap from one node's SASL_SSL port, and produce
  to and consume from a topic with a partition led by each broker: Metadata sends them to the other
  broker's SASL_SSL endpoint, never to a plain-text one; a wrong password is refused there.
- What a cluster cannot do yet is refused at ``onceflow serve`` with one line naming the setting: a
  SASL controller listener whose JAAS line gives no identity for the node to connect to the other
  controllers with. (The authorizer and SCRAM on a cluster: ``test_cluster_acls``.)

Bounded: every wait has a deadline; every process is killed at the end, whatever failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.helpers.broker import LOOPBACK, free_port
from tests.helpers.certs import make_pki
from tests.helpers.cluster import ClusterNodes, NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(300)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_app="app-secret" user_admin="admin-secret";'
)
DEADLINE_S = 60.0


class SecureNode(NodeProcess):
    """A combined node with a SASL_SSL ``CLIENT`` listener of its own port."""

    def __init__(self, *args, security: dict[str, str], **kwargs) -> None:
        self.client_port = free_port()
        self.security = security
        super().__init__(*args, **kwargs)

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        settings["listeners"] += f",CLIENT://{LOOPBACK}:{self.client_port}"
        return {
            **settings,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            **self.security,
        }


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, pki):
    security = {
        "ssl.keystore.location": str(pki.server_keystore),
        "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        # Two brokers: the internal topics cannot have Kafka's default 3 replicas (as on Kafka).
        "offsets.topic.replication.factor": "2",
        "transaction.state.log.replication.factor": "2",
        "transaction.state.log.min.isr": "1",
    }
    nodes = ClusterNodes(tmp_path_factory.mktemp("secure-cluster"), 2)
    nodes.nodes = {
        node_id: SecureNode(
            nodes.root / f"node-{node_id}", node_id, port, cport, nodes.voters, security=security
        )
        for node_id, port, cport in nodes.layout
    }
    with nodes:
        yield nodes


def client_settings(cluster, pki, password: str = "app-secret") -> dict:
    first = next(iter(cluster.nodes.values()))
    return {
        "bootstrap.servers": f"{LOOPBACK}:{first.client_port}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca),
    }


def test_metadata_on_the_sasl_ssl_listener_names_every_broker_there(cluster, pki):
    from onceflow.client import AdminClient

    with AdminClient(
        client_settings(cluster, pki)["bootstrap.servers"], security=client_settings(cluster, pki)
    ) as admin:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            brokers = admin.describe_cluster().brokers
            if len(brokers) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    ports = {node.client_port for node in cluster.nodes.values()}
    assert {b.port for b in brokers} == ports  # the CLIENT ports, not the plain-text ones


def test_confluent_kafka_and_ours_produce_and_consume_across_both_brokers(cluster, pki):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    from onceflow.client import Consumer, Producer

    settings = client_settings(cluster, pki)
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)

    producer = confluent_kafka.Producer({**settings, "enable.idempotence": True})
    for partition in (0, 1):
        for n in range(5):
            producer.produce(topic, f"ck-{partition}-{n}".encode(), partition=partition)
    assert producer.flush(30) == 0
    ours = Producer(settings)
    try:
        for partition in (0, 1):
            ours.send(topic, f"ours-{partition}".encode(), partition=partition).result(30)
    finally:
        ours.close()

    consumer = Consumer(topic, config={**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 12 and time.monotonic() < deadline:
            seen |= {r.value for r in consumer.poll(timeout_ms=500)}
    finally:
        consumer.close()
    assert seen == {f"ck-{p}-{n}".encode() for p in (0, 1) for n in range(5)} | {b"ours-0", b"ours-1"}


def test_a_wrong_password_is_refused_on_the_cluster(cluster, pki):
    from onceflow.client import Producer
    from onceflow.protocol.errors import KafkaError

    with pytest.raises(KafkaError, match="(?i)authentication"):
        producer = Producer({**client_settings(cluster, pki, password="guess"), "request.timeout.ms": 5000})
        try:
            producer.send("anything", b"x", partition=0).result(20)
        finally:
            producer.close()


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (
            {
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,CLIENT:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.controller.protocol": "PLAIN",
            },
            # The JAAS line has users to accept, but no username/password for this node to send.
            'sends the username="..." password="..." of this line',
        ),
    ],
)
def test_what_a_cluster_cannot_do_yet_is_refused_at_start(tmp_path: Path, settings, words):
    port, cport = free_port(), free_port()
    base = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{cport}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{cport},CLIENT://{LOOPBACK}:{free_port()}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "plain.sasl.jaas.config": PLAIN_JAAS,
    }
    configs = [arg for key, value in {**base, **settings}.items() for arg in ("--config", f"{key}={value}")]
    done = subprocess.run(
        [sys.executable, "-m", "onceflow", "serve", "--data-dir", str(tmp_path / "data"), *configs],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert words in done.stderr
    assert "Traceback" not in done.stderr
