"""Kafka's ACL rules as clients meet them: a principal that may write a topic but not a transactional id
cannot fence another's transactional producer; without READ on a group no offset commit; PREFIXED
ACLs and DENY over ALLOW; Metadata shows only topics one may describe; an idempotent producer needs
WRITE on some topic (Kafka 3+) or IDEMPOTENT_WRITE; a client certificate's principal gets its ACLs;
KIP-430's authorized operations; the principal is the quota user."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaException

from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.admin_security import AclBinding
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType
from onceflow.protocol.errors import KafkaError

pytestmark = pytest.mark.timeout(240)

T, G, X, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER
Op = AclOperation


def allow(principal, rtype, name, op, pattern=PatternType.LITERAL, permission=PermissionType.ALLOW):
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


@pytest.fixture(scope="module")
def broker(secure_broker):
    with AdminClient(secure_broker.bootstrap, security=secure_broker.scram()) as admin:
        for topic in ("rules-shared", "rules-orders", "rules-secret-keys", "rules-hidden"):
            admin.create_topic(topic, 1)
        admin.create_acls(
            [
                # alice owns transactional id rules-tx; bob may write the same topic, not that id.
                allow("User:alice", T, "rules-shared", Op.ALL),
                allow("User:alice", X, "rules-tx", Op.ALL),
                allow("User:bob", T, "rules-shared", Op.WRITE),
                allow("User:bob", T, "rules-shared", Op.READ),
                allow("User:bob", X, "rules-bob-", Op.WRITE, PatternType.PREFIXED),
                # bob may read the topic and join group rules-g1, but has no READ on rules-g2.
                allow("User:bob", G, "rules-g1", Op.READ),
                allow("User:bob", G, "rules-g2", Op.DESCRIBE),
                # PREFIXED allow on rules-, DENY on rules-secret-: deny wins.
                allow("User:carol", T, "rules-", Op.ALL, PatternType.PREFIXED),
                allow("User:carol", T, "rules-secret-", Op.READ, PatternType.PREFIXED, PermissionType.DENY),
                allow("User:carol", T, "rules-hidden", Op.DESCRIBE, permission=PermissionType.DENY),
            ]
        )
    return secure_broker


def test_writing_a_topic_does_not_let_one_fence_anothers_transactional_producer(broker):
    alice = Producer({**broker.scram("alice"), "transactional.id": "rules-tx"})
    try:
        alice.init_transactions()
        alice.begin_transaction()
        alice.send("rules-shared", b"alice-1", partition=0)
        # bob takes over the same transactional id: refused, so alice is not fenced.
        bob = confluent_kafka.Producer({**broker.scram("bob"), "transactional.id": "rules-tx"})
        with pytest.raises(KafkaException) as refused:
            bob.init_transactions(15)
        assert (
            refused.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        alice.send("rules-shared", b"alice-2", partition=0)
        alice.commit_transaction()  # alice's epoch is untouched: the commit goes through
    finally:
        alice.close()
    # bob may still write the topic, idempotently (WRITE on a topic is enough: Kafka 3+)...
    plain = confluent_kafka.Producer({**broker.scram("bob"), "enable.idempotence": True})
    errors = []
    plain.produce("rules-shared", b"bob", partition=0, on_delivery=lambda e, m: errors.append(e))
    plain.flush(15)
    assert errors == [None]
    # ...and transactionally under his own prefix.
    own = confluent_kafka.Producer({**broker.scram("bob"), "transactional.id": "rules-bob-1"})
    own.init_transactions(15)
    own.begin_transaction()
    own.produce("rules-shared", b"bob-tx", partition=0)
    own.commit_transaction(15)
    consumer = Consumer(
        "rules-shared",
        config={
            **broker.scram(),
            "group.id": "rules-check",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        },
    )
    got = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=500)]
    finally:
        consumer.close()
    assert sorted(got) == [b"alice-1", b"alice-2", b"bob", b"bob-tx"]


def test_no_offset_commit_without_read_on_the_group(broker):
    def commit(group: str) -> None:
        consumer = confluent_kafka.Consumer(
            {
                **broker.scram("bob"),
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.assign([confluent_kafka.TopicPartition("rules-shared", 0, 1)])
            consumer.commit(
                offsets=[confluent_kafka.TopicPartition("rules-shared", 0, 1)], asynchronous=False
            )
        finally:
            consumer.close()

    commit("rules-g1")
    with pytest.raises(KafkaException) as refused:
        commit("rules-g2")
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED
    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        assert admin.list_group_offsets("rules-g1")[TopicPartition("rules-shared", 0)].offset == 1
        assert admin.list_group_offsets("rules-g2") == {}


def test_prefixed_allow_and_deny_over_allow(broker):
    carol = broker.plain("carol")
    producer = Producer(carol)
    try:
        producer.send("rules-orders", b"o", partition=0).get(15)  # PREFIXED rules- allows it
        producer.send("rules-secret-keys", b"k", partition=0).get(15)  # DENY is for READ only
    finally:
        producer.close()

    def read(topic: str) -> list[bytes]:
        consumer = Consumer(config={**carol, "auto.offset.reset": "earliest"})  # no group: no group ACL
        consumer.assign([(topic, 0)])
        try:
            deadline = time.monotonic() + 15
            got = []
            while not got and time.monotonic() < deadline:
                got += [r.value for r in consumer.poll(timeout_ms=500)]
            return got
        finally:
            consumer.close()

    assert read("rules-orders") == [b"o"]
    with pytest.raises(KafkaError) as denied:
        read("rules-secret-keys")
    assert denied.value.code.name == "TOPIC_AUTHORIZATION_FAILED"


def test_metadata_shows_only_what_one_may_describe(broker):
    with AdminClient(broker.bootstrap, security=broker.plain("carol")) as admin:
        visible = set(admin.list_topics())
    assert {"rules-orders", "rules-shared", "rules-secret-keys"} <= visible
    assert "rules-hidden" not in visible  # a DENY DESCRIBE hides it
    with AdminClient(broker.bootstrap, security=broker.scram("bob")) as admin:
        assert set(admin.list_topics()) == {"rules-shared"}


def test_certificate_principal_gets_its_acls(broker):
    # CN=alice,OU=eng,O=onceflow maps to User:alice (ssl.principal.mapping.rules): alice's ACLs apply.
    producer = Producer(broker.mtls("alice"))
    try:
        producer.send("rules-shared", b"by-certificate", partition=0).get(15)
    finally:
        producer.close()
    # CN=bob,OU=ops maps to User:bob: no ALTER on the topic, so no partitions added.
    with (
        AdminClient(broker.mtls("bob")["bootstrap.servers"], security=broker.mtls("bob")) as admin,
        pytest.raises(KafkaError) as denied,
    ):
        admin.create_partitions("rules-shared", 2)
    assert denied.value.code.name == "TOPIC_AUTHORIZATION_FAILED"


def test_authorized_operations_come_from_the_acls(broker):
    from confluent_kafka.admin import AdminClient as CAdmin

    admin = CAdmin(broker.scram("bob"))
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert not cluster.authorized_operations  # no DESCRIBE on the cluster: none listed
    described = admin.describe_topics(
        confluent_kafka.TopicCollection(["rules-shared"]), include_authorized_operations=True
    )["rules-shared"].result(15)
    names = {op.name for op in described.authorized_operations}
    assert names == {"READ", "WRITE", "DESCRIBE"}
    groups = admin.describe_consumer_groups(["rules-g2"], include_authorized_operations=True)[
        "rules-g2"
    ].result(15)
    assert {op.name for op in groups.authorized_operations} == {"DESCRIBE"}


def test_the_principal_is_the_quota_user(broker):
    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        admin.alter_client_quotas({"user": "dave"}, {"producer_byte_rate": 1024})
        admin.create_acls([allow("User:dave", T, "rules-", Op.WRITE, PatternType.PREFIXED)])
    producer = confluent_kafka.Producer({**broker.plain("dave"), "linger.ms": 0})
    delivered = []
    for _ in range(8):
        producer.produce(
            "rules-orders", b"x" * 2048, partition=0, on_delivery=lambda e, m: delivered.append(e)
        )
        producer.flush(15)
    assert delivered == [None] * 8
    log = broker.log_text()
    assert "(user dave) is over its quota" in log
