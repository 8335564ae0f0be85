"""Clients nobody here wrote, and ours, over the secured listeners: SASL_SSL with SCRAM-SHA-512 and with
PLAIN, and mTLS. Each commits a transaction of records to its own topic, then a read_committed
consumer group reads them and commits its offsets, which the admin (a super user) then finds."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time

import pytest

from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.admin_security import AclBinding
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

RECORDS = 5
# (mode, the principal it authenticates as)
MODES = {"scram512": "User:alice", "plain": "User:carol", "mtls": "User:alice"}


@pytest.fixture(scope="module")
def broker(secure_broker):
    """Each principal may use the topics, groups and transactional ids that start with interop-."""
    acls = [
        AclBinding(
            rtype, "interop-", PatternType.PREFIXED, principal, "*", AclOperation.ALL, PermissionType.ALLOW
        )
        for principal in set(MODES.values())
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ]
    with AdminClient(secure_broker.bootstrap, security=secure_broker.scram()) as admin:
        admin.create_acls(acls)
    return secure_broker


def settings(broker, mode: str) -> dict:
    return {"scram512": broker.scram("alice"), "plain": broker.plain("carol"), "mtls": broker.mtls("alice")}[
        mode
    ]


def committed_offset(broker, group: str, topic: str) -> int:
    from onceflow.client.consumer.structs import TopicPartition

    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        offsets = admin.list_group_offsets(group)
    return offsets[TopicPartition(topic, 0)].offset


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------------


def confluent_round(conf: dict, topic: str, group: str) -> list[bytes]:
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import Producer as CProducer

    producer = CProducer({**conf, "transactional.id": f"{topic}-tx"})
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    producer.commit_transaction(20)
    consumer = CConsumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


# -- kafka-python ----------------------------------------------------------------------------------------


def _kafka_python_args(conf: dict) -> dict:
    args = {
        "bootstrap_servers": conf["bootstrap.servers"],
        "security_protocol": conf["security.protocol"],
        "ssl_cafile": conf["ssl.ca.location"],
        "ssl_check_hostname": True,
    }
    if "sasl.mechanism" in conf:
        args.update(
            sasl_mechanism=conf["sasl.mechanism"],
            sasl_plain_username=conf["sasl.username"],
            sasl_plain_password=conf["sasl.password"],
        )
    if "ssl.certificate.location" in conf:
        args.update(ssl_certfile=conf["ssl.certificate.location"], ssl_keyfile=conf["ssl.key.location"])
    return args


def kafka_python_round(conf: dict, topic: str, group: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    args = _kafka_python_args(conf)
    producer = KafkaProducer(**args, transactional_id=f"{topic}-tx")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.send(topic, f"v{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **args,
        group_id=group,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    consumer.commit()
    consumer.close()
    return got


# -- aiokafka --------------------------------------------------------------------------------------------


def aiokafka_round(conf: dict, topic: str, group: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    context = ssl.create_default_context(cafile=conf["ssl.ca.location"])
    if "ssl.certificate.location" in conf:
        context.load_cert_chain(conf["ssl.certificate.location"], conf["ssl.key.location"])
    args = {
        "bootstrap_servers": conf["bootstrap.servers"],
        "security_protocol": conf["security.protocol"],
        "ssl_context": context,
    }
    if "sasl.mechanism" in conf:
        args.update(
            sasl_mechanism=conf["sasl.mechanism"],
            sasl_plain_username=conf["sasl.username"],
            sasl_plain_password=conf["sasl.password"],
        )

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**args, transactional_id=f"{topic}-tx")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(RECORDS):
                    await producer.send(topic, f"v{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            **args,
            group_id=group,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            enable_auto_commit=False,
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while len(got) < RECORDS and asyncio.get_running_loop().time() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


# -- onceflow --------------------------------------------------------------------------------------------


def onceflow_round(conf: dict, topic: str, group: str) -> list[bytes]:
    producer = Producer({**conf, "transactional.id": f"{topic}-tx"})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(RECORDS):
            producer.send(topic, f"v{i}".encode(), partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = Consumer(
        topic,
        config={
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        },
    )
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < RECORDS and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=500)]
        consumer.commit()
    finally:
        consumer.close()
    return got


ROUNDS = {
    "confluent": confluent_round,
    "kafka-python": kafka_python_round,
    "aiokafka": aiokafka_round,
    "onceflow": onceflow_round,
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("client", sorted(ROUNDS))
def test_transactions_and_groups_over_secured_listeners(broker, client, mode):
    topic = f"interop-{client}-{mode}"
    group = f"interop-{client}-{mode}-group"
    got = ROUNDS[client](settings(broker, mode), topic, group)
    assert got == [f"v{i}".encode() for i in range(RECORDS)]
    # The group committed its position: past the records (librdkafka), or past their commit marker too.
    assert committed_offset(broker, group, topic) in (RECORDS, RECORDS + 1)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)")
@pytest.mark.parametrize("mode", sorted(MODES))
def test_kcat_produces_and_consumes_over_secured_listeners(broker, mode):
    """kcat (librdkafka's command-line tool) with the same -X settings a user would give it."""
    conf = settings(broker, mode)
    topic = f"interop-kcat-{mode}"
    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        admin.create_topic(topic)
    options = [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    lines = [f"line {i}" for i in range(20)]

    def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["kcat", "-X", "broker.address.family=v4", *options, *args],
            input=stdin,
            capture_output=True,
            timeout=60,
            check=False,
        )

    produced = kcat("-P", "-t", topic, "-p", "0", stdin="\n".join(lines).encode() + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines() == lines
    # A wrong password gets nothing through.
    if mode != "mtls":
        wrong = subprocess.run(
            [
                "kcat",
                "-X",
                "broker.address.family=v4",
                *options,
                "-X",
                "sasl.password=guess",
                "-L",
                "-m",
                "10",
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert wrong.returncode != 0
        assert b"Authentication failed" in wrong.stderr or b"authentication" in wrong.stderr.lower()
