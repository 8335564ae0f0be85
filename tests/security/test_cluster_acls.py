"""ACLs and SCRAM credentials on a cluster: two combined nodes with the authorizer on and a
SASL_PLAINTEXT client listener (SCRAM-SHA-512), brokers reaching each other on PLAINTEXT as
``User:ANONYMOUS``, a super user as docs/security.md says such a cluster needs. The ``admin`` super
user's credential is set in each data dir before the first start (``onceflow users scram set
--data-dir``, as ``kafka-storage format --add-scram``): the first controller brings it into the
metadata log.

- A SCRAM user and ACLs made through one broker hold on both: the user logs in on each (its
  credential reached that broker's image), each broker lets it see the topic it may write and not
  the other, confluent-kafka produces to a partition led by each broker and is refused the other topic;
  kafka-python's admin lists the ACLs and our admin the user through the other broker.
- Every node killed (SIGKILL) and started again: the same holds (the metadata log kept them).
- Deleting through the other broker removes them on both: the topic is refused, then the login.

Admin requests go to one named broker each (a connection of our client to that broker's port), so
"made through one broker" is what happens. Bounded: every wait has a deadline; no timing asserts.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DescribeUserScramCredentialsRequest,
)
from kafka.protocol.metadata import MetadataRequest
from tests.helpers.acl_cluster import AuthorizingNode, authorizing_cluster
from tests.helpers.broker import LOOPBACK

from onceflow.metadata.scram import salted_password
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType
from onceflow.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(300)]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")

ADMIN = ("SCRAM-SHA-512", "admin", "admin-secret")
ALICE = ("SCRAM-SHA-512", "alice", "alice-secret")
ALLOWED, SECRET = "acl-orders", "acl-secret"
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = authorizing_cluster(
        tmp_path_factory.mktemp("acl-cluster"),
        2,
        extra={
            # After the restart, a broker's old registration must expire before it registers again.
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            "transaction.state.log.min.isr": "1",
        },
    )
    for node in nodes.nodes.values():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "onceflow",
                "users",
                "scram",
                "set",
                "--data-dir",
                str(node.data_dir),
                "--user",
                "admin",
                "--password",
                "admin-secret",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    with nodes:
        yield nodes
        nodes.kill_all()  # nothing here needs a controlled shutdown, which takes a while on two nodes


def call(node: AuthorizingNode, who: tuple[str, str, str], body, version: int):
    """One request to ``node``'s CLIENT listener, authenticated as ``who`` (mechanism, user, password)."""
    from onceflow.client.connection import Connection
    from onceflow.client.security import ClientSecurity

    mechanism, user, password = who
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_username=user, sasl_password=password
    )

    async def once():
        conn = await Connection.open(LOOPBACK, node.client_port, security=security, request_timeout_s=20)
        try:
            return await conn.send(body, version=version)
        finally:
            await conn.close()

    return asyncio.run(once())


def topic_errors(node, who) -> dict[str, int] | None:
    """What ``node`` answers ``who`` for the two topics in Metadata; None if it cannot log in."""
    topic = MetadataRequest.MetadataRequestTopic
    body = MetadataRequest(
        topics=[topic(name=n, topic_id=None) for n in (ALLOWED, SECRET)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    try:
        response = call(node, who, body, 9)
    except Exception:  # noqa: BLE001 - not (or no longer) a user there: a refused login
        return None
    return {t.name: t.error_code for t in response.topics}


def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S:.0f}s: {what}")
        time.sleep(0.2)


def each_broker_answers(cluster, expected, who=ALICE) -> None:
    for node_id, node in cluster.nodes.items():
        wait_for(
            f"broker {node_id} answers {expected}", lambda node=node: topic_errors(node, who) == expected
        )


def alice_acl_creation():
    return CreateAclsRequest.AclCreation(
        resource_type=int(ResourceType.TOPIC),
        resource_name=ALLOWED,
        resource_pattern_type=int(PatternType.LITERAL),
        principal="User:alice",
        host="*",
        operation=int(AclOperation.WRITE),
        permission_type=int(PermissionType.ALLOW),
    )


def create_topics(node) -> None:
    spec = CreateTopicsRequest.CreatableTopic
    body = CreateTopicsRequest(
        topics=[
            spec(name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[])
            for name in (ALLOWED, SECRET)
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    response = call(node, ADMIN, body, 5)
    assert [t.error_code for t in response.topics] == [0, 0]


def test_a_user_and_acls_made_through_one_broker_hold_on_both(cluster):
    first, second = cluster.nodes[1], cluster.nodes[2]
    create_topics(first)
    salt = uuid.uuid4().bytes
    upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="alice",
        mechanism=2,
        iterations=4096,
        salt=salt,
        salted_password=salted_password("SCRAM-SHA-512", "alice-secret", salt, 4096),
    )
    response = call(first, ADMIN, AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsert]), 0)
    assert [(r.user, r.error_code) for r in response.results] == [("alice", 0)]
    response = call(first, ADMIN, CreateAclsRequest(creations=[alice_acl_creation()]), 2)
    assert [r.error_code for r in response.results] == [0]

    # Both brokers: alice logs in (SCRAM), sees the topic she may write and not the other.
    each_broker_answers(cluster, {ALLOWED: 0, SECRET: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})

    # A real client through the other broker: a partition led by each broker, and the refused topic.
    confluent_kafka = pytest.importorskip("confluent_kafka")
    settings = {
        "bootstrap.servers": f"{LOOPBACK}:{second.client_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "message.timeout.ms": 20000,
    }
    errors: dict[str, object] = {}
    producer = confluent_kafka.Producer(settings)
    for partition in (0, 1):
        producer.produce(
            ALLOWED, b"x", partition=partition, on_delivery=lambda e, m: errors.update({m.topic(): e})
        )
    producer.produce(SECRET, b"x", partition=0, on_delivery=lambda e, m: errors.update({m.topic(): e}))
    assert producer.flush(40) == 0
    del producer  # librdkafka's threads end with it, not after the cluster
    assert errors[ALLOWED] is None
    assert (
        errors[SECRET] is not None
        and errors[SECRET].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    )

    # Described through the other broker: kafka-python's admin lists the ACL, ours the user.
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    admin = KafkaAdminClient(
        bootstrap_servers=f"{LOOPBACK}:{second.client_port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
    )
    try:
        acls, error = admin.describe_acls(
            ACLFilter(
                principal="User:alice",
                host=None,
                operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
        )
    finally:
        admin.close()
    assert [(a.resource_pattern.resource_name, a.operation) for a in acls] == [(ALLOWED, ACLOperation.WRITE)]
    alice = DescribeUserScramCredentialsRequest.UserName(name="alice")
    described = call(second, ADMIN, DescribeUserScramCredentialsRequest(users=[alice]), 0)
    assert [
        (r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in described.results
    ] == [("alice", [(2, 4096)])]


def test_they_survive_a_restart_of_every_node(cluster):
    cluster.kill_all()
    cluster.start()
    each_broker_answers(cluster, {ALLOWED: 0, SECRET: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})


def test_deleting_through_one_broker_removes_them_on_both(cluster):
    first, second = cluster.nodes[1], cluster.nodes[2]
    acl_filter = DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=int(ResourceType.ANY),
        resource_name_filter=None,
        pattern_type_filter=int(PatternType.ANY),
        principal_filter="User:alice",
        host_filter=None,
        operation=int(AclOperation.ANY),
        permission_type=int(PermissionType.ANY),
    )
    response = call(second, ADMIN, DeleteAclsRequest(filters=[acl_filter]), 2)
    (result,) = response.filter_results
    assert result.error_code == 0 and [m.resource_name for m in result.matching_acls] == [ALLOWED]
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    each_broker_answers(cluster, {ALLOWED: denied, SECRET: denied})

    deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="alice", mechanism=2)
    response = call(first, ADMIN, AlterUserScramCredentialsRequest(deletions=[deletion], upsertions=[]), 0)
    assert [(r.user, r.error_code) for r in response.results] == [("alice", 0)]
    for node_id, node in cluster.nodes.items():
        wait_for(
            f"alice cannot log in on broker {node_id}", lambda node=node: topic_errors(node, ALICE) is None
        )
