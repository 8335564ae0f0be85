"""The controller listener's authorizer on a real cluster: two combined nodes reaching each other over
SASL_SSL (PLAIN, ``tests.helpers.secure_cluster``) with the authorizer on, the nodes' principals
(``User:controller`` on the controller listener, ``User:broker`` on the inter-broker one) in
super.users, as docs/security.md says a cluster needs, and a second user, ``intruder``, in the
controller listener's JAAS user list. Clients keep a PLAINTEXT listener whose ``User:ANONYMOUS`` is
a super user too (the test's admin).

- The quorum forms before any ACL exists, both brokers register, and a topic created through a
  broker (forwarded to the controller as the node) comes into being.
- ``intruder`` authenticates on the active controller's listener, but its Vote at a far higher epoch
  (which would make the leader resign) and its BrokerRegistration of a new broker id are answered
  CLUSTER_AUTHORIZATION_FAILED: the quorum's leader and epoch, and the registered brokers, stay as
  they were.

One cluster for the module; every wait is bounded; every process is killed.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.helpers.broker import LOOPBACK
from tests.helpers.certs import make_pki
from tests.helpers.cluster import ClusterNodes, quorum, request
from tests.helpers.secure_cluster import PLAIN_MODULE, secure_internal_listeners

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(120)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.replication.cluster_ops import FAST, wait_until  # noqa: E402

from onceflow.protocol.errors import ErrorCode  # noqa: E402

CONTROLLER_JAAS = (
    f'{PLAIN_MODULE} username="controller" password="controller-secret" '
    'user_controller="controller-secret" user_intruder="intruder-secret";'
)
SETTINGS = {
    **FAST,
    "offsets.topic.replication.factor": "2",
    "transaction.state.log.replication.factor": "2",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:controller;User:broker;User:ANONYMOUS",
    "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
}
DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("controller-acls")
    pki = make_pki(root / "pki")
    nodes = secure_internal_listeners(ClusterNodes(root, 2, extra=SETTINGS), pki)
    nodes.pki = pki
    with nodes:
        yield nodes


def registered_brokers(bootstrap: str) -> set[int]:
    """Every broker the first broker's image has registered, fenced or not (DescribeCluster)."""
    from kafka.protocol.admin import DescribeClusterRequest

    body = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
    )
    return {b.broker_id for b in asyncio.run(request(bootstrap, body, 2)).brokers}


def test_the_quorum_forms_and_forwarded_admin_requests_pass_with_the_nodes_as_super_users(cluster):
    state = wait_until(lambda: quorum(cluster.bootstrap), 30, "a quorum leader")
    assert state.leader_id in cluster.nodes
    assert wait_until(lambda: registered_brokers(cluster.bootstrap) == {1, 2}, 30, "two brokers")
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"acl-forwarded-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=30).values():
        future.result(30)
    assert topic in admin.list_topics(timeout=10).topics


async def _as_intruder(port: int, pki, body, version: int):
    from onceflow.client.connection import Connection
    from onceflow.client.security import ClientSecurity

    security = ClientSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="intruder",
        sasl_password="intruder-secret",
        ssl_ca_location=str(pki.ca),
    )
    connection = await Connection.open(LOOPBACK, port, security=security, connect_timeout_s=10)
    try:
        return await connection.send(body, version=version)
    finally:
        await connection.close()


def test_an_authenticated_principal_without_cluster_action_changes_nothing(cluster):
    from onceflow.protocol.messages import BrokerRegistrationRequest
    from onceflow.raft import wire
    from onceflow.raft.messages import VoteRequest

    before = wait_until(lambda: quorum(cluster.bootstrap), 30, "a quorum leader")
    brokers = wait_until(
        lambda: registered_brokers(cluster.bootstrap) == {1, 2} and {1, 2}, 30, "two brokers"
    )
    leader = cluster.nodes[before.leader_id]
    candidate = next(node_id for node_id in cluster.nodes if node_id != before.leader_id)

    vote = wire.request_to_wire(VoteRequest(before.leader_epoch + 100, candidate, before.leader_epoch, 10**9))
    answer = asyncio.run(_as_intruder(leader.controller_port, cluster.pki, vote, vote.API_VERSION))
    assert answer.error_code == DENIED

    registration = BrokerRegistrationRequest(
        broker_id=9,
        cluster_id=answer_cluster_id(cluster),
        incarnation_id=uuid.uuid4(),
        listeners=[
            BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=LOOPBACK, port=9, security_protocol=0)
        ],
        features=[
            BrokerRegistrationRequest.Feature(
                name="metadata.version", min_supported_version=1, max_supported_version=14
            )
        ],
        rack=None,
    )
    answer = asyncio.run(_as_intruder(leader.controller_port, cluster.pki, registration, 0))
    assert answer.error_code == DENIED

    after = quorum(cluster.bootstrap)
    assert (after.leader_id, after.leader_epoch) == (before.leader_id, before.leader_epoch)
    # A registration the controller took would be in the brokers' images by the time a topic made
    # afterwards is (the metadata log is applied in order).
    from confluent_kafka.admin import AdminClient, NewTopic

    marker = f"acl-after-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(marker, 1, 2)], request_timeout=30).values():
        future.result(30)
    wait_until(lambda: marker in topic_names(cluster.bootstrap), 30, "the marker topic")
    assert registered_brokers(cluster.bootstrap) == brokers


def _metadata(bootstrap: str):
    """The first broker's Metadata answer (its own image), every topic."""
    from kafka.protocol.metadata import MetadataRequest

    return asyncio.run(request(bootstrap, MetadataRequest(topics=None, allow_auto_topic_creation=False), 12))


def topic_names(bootstrap: str) -> set[str]:
    return {t.name for t in _metadata(bootstrap).topics}


def answer_cluster_id(cluster) -> str:
    return _metadata(cluster.bootstrap).cluster_id
