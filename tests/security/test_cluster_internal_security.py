"""A 3-node cluster whose nodes reach each other only over SASL_SSL (PLAIN), then one whose nodes
reach each other only over mutual TLS: the controller listener (Raft between the voters, broker
registration and heartbeats, forwarded admin requests) and the inter-broker listener (replica
fetches), with their own JAAS identities under SASL, the node's certificate under mTLS; clients use a
PLAINTEXT listener of their own (``tests.helpers.secure_cluster``).

- The quorum forms, the three brokers register, a topic with three replicas is created through a
  broker (forwarded to the controller), and librdkafka's acks=all produce succeeds with every
  follower in the ISR: replication ran over the secured inter-broker listener.
- Reaching a controller listener in plain text, over TLS without SASL or with a wrong password
  (SASL_SSL), without a certificate or with one from an unknown CA (mTLS) gets no request served: a
  Vote with a far higher epoch sent that way would make the leader resign (it does when sent with the
  right password), and the quorum's leader and epoch stay as they were.

One cluster at a time (module-scoped, per mode); every wait is bounded; every process is killed.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.helpers.broker import LOOPBACK
from tests.helpers.certs import make_pki
from tests.helpers.cluster import ClusterNodes, quorum
from tests.helpers.secure_cluster import secure_internal_listeners

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(240)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.replication.cluster_ops import FAST, create_topic, partitions_of, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", params=["sasl_ssl", "mtls"])
def cluster(request, tmp_path_factory, pki):
    nodes = secure_internal_listeners(
        ClusterNodes(tmp_path_factory.mktemp(f"internal-{request.param}"), 3, extra=FAST), pki, request.param
    )
    with nodes:
        yield nodes


def test_the_quorum_forms_and_every_broker_registers_over_sasl_ssl(cluster):
    state = wait_until(lambda: quorum(cluster.bootstrap), 30, "a quorum leader")
    assert state.leader_id in cluster.nodes and state.leader_epoch > 0
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
    brokers = wait_until(
        lambda: len(admin.list_topics(timeout=10).brokers) == 3 and admin.list_topics(timeout=10).brokers,
        30,
        "three registered brokers",
    )
    assert set(brokers) == {1, 2, 3}
    # Clients are told the PLAINTEXT listener, never the inter-broker one.
    assert {b.port for b in brokers.values()} == {node.port for node in cluster.nodes.values()}


def test_a_three_replica_partition_replicates_over_the_secured_inter_broker_listener(cluster):
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, min_isr=3)  # waits for every follower in the ISR
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    failures = []
    for n in range(20):
        producer.produce(topic, f"v{n}".encode(), on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(60) == 0
    assert failures == []  # min.insync.replicas=3: every follower fetched each batch
    view = partitions_of(cluster.bootstrap, topic)[0]
    assert view.isr == (1, 2, 3)


async def _attempt_vote(port: int, epoch: int, candidate: int, security) -> str:
    """Send a Vote for ``candidate`` at ``epoch`` to the controller listener on ``port``; what came of it."""
    from onceflow.client.connection import Connection
    from onceflow.raft import wire
    from onceflow.raft.messages import VoteRequest

    try:
        connection = await Connection.open(LOOPBACK, port, security=security, connect_timeout_s=10)
    except Exception as exc:  # noqa: BLE001 - each refusal has its own error; what matters is below
        return f"refused: {exc}"
    try:
        message = wire.request_to_wire(VoteRequest(epoch, candidate, epoch - 1, 10**9))
        await connection.send(message, version=message.API_VERSION)
    except Exception as exc:  # noqa: BLE001
        return f"closed: {exc}"
    finally:
        await connection.close()
    return "answered"


def test_unauthenticated_connections_to_the_controller_listener_change_nothing(cluster, pki):
    from onceflow.client.security import ClientSecurity

    before = wait_until(lambda: quorum(cluster.bootstrap), 30, "a quorum leader")
    leader = cluster.nodes[before.leader_id]
    candidate = next(node_id for node_id in cluster.nodes if node_id != before.leader_id)
    tls = {"ssl_ca_location": str(pki.ca)}
    mtls = leader.mode == "mtls"
    attempts = {
        "plain text": None,
        "TLS without a certificate or SASL": ClientSecurity(protocol="SSL", **tls),
    }
    if mtls:
        attempts["a certificate from an unknown CA"] = ClientSecurity(
            protocol="SSL",
            ssl_certificate_location=str(pki.rogue_cert),
            ssl_key_location=str(pki.rogue_key),
            **tls,
        )
    else:
        attempts["a wrong password"] = ClientSecurity(
            protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="controller",
            sasl_password="guess",
            **tls,
        )
    outcomes = {
        what: asyncio.run(
            _attempt_vote(leader.controller_port, before.leader_epoch + 100, candidate, security)
        )
        for what, security in attempts.items()
    }
    assert "answered" not in outcomes.values(), outcomes
    if not mtls:
        assert "authentication" in outcomes["a wrong password"].lower()
    after = quorum(cluster.bootstrap)
    assert (after.leader_id, after.leader_epoch) == (before.leader_id, before.leader_epoch)
