"""confluent-kafka (librdkafka) transactional producer and read_committed consumer against a broker
process: commit, abort, multi-partition atomicity, send_offsets_to_transaction, zombie fencing and
the coordinator's timeout abort."""

from __future__ import annotations

import time
import uuid

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

ABORT_TIMER_MS = 300


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("txn-confluent"),
        extra_args=(
            "--config",
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={ABORT_TIMER_MS}",
        ),
    )
    proc.start()
    yield proc
    proc.stop()


def create_topic(bootstrap: str, partitions: int = 3) -> str:
    name = topic_name("txn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(15)
    return name


def producer(bootstrap: str, tid: str, **extra) -> ck.Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    return ck.Producer(conf)


def read_all(bootstrap: str, topic: str, isolation: str, expected: int | None = None, idle_s: float = 3.0):
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    last = time.monotonic()
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if (expected is None or len(values) >= expected) and time.monotonic() - last > idle_s:
                break
            continue
        if msg.error():
            continue
        values.append(msg.value())
        last = time.monotonic()
    consumer.close()
    return values


def test_commit_is_atomic_across_partitions(txn_broker):
    topic = create_topic(txn_broker.bootstrap)
    p = producer(txn_broker.bootstrap, "ck-commit")
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c%d" % i, partition=i % 3)
    # Before the commit a read_committed reader sees nothing of it.
    p.flush(10)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", idle_s=1.5) == []
    p.commit_transaction(15)
    got = read_all(txn_broker.bootstrap, topic, "read_committed", expected=30)
    assert sorted(got) == sorted(b"c%d" % i for i in range(30))


def test_abort_hides_records_from_read_committed_only(txn_broker):
    topic = create_topic(txn_broker.bootstrap)
    p = producer(txn_broker.bootstrap, "ck-abort")
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % 3)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"kept-%d" % i, partition=i % 3)
    p.commit_transaction(15)
    committed = read_all(txn_broker.bootstrap, topic, "read_committed", expected=10)
    assert sorted(committed) == sorted(b"kept-%d" % i for i in range(10))
    everything = read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=20)
    assert len(everything) == 20


def test_send_offsets_to_transaction_commits_the_group_offsets(txn_broker):
    source = create_topic(txn_broker.bootstrap, 1)
    sink = create_topic(txn_broker.bootstrap, 1)
    seed = ck.Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(5):
        seed.produce(source, value=b"in-%d" % i)
    seed.flush(10)
    group = f"copier-{uuid.uuid4().hex[:6]}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": txn_broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    p = producer(txn_broker.bootstrap, "ck-offsets")
    p.init_transactions(15)
    p.begin_transaction()
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        p.produce(sink, value=msg.value().replace(b"in", b"out"))
        seen += 1
    assert seen == 5
    positions = consumer.position(consumer.assignment())
    p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
    p.commit_transaction(15)
    committed = consumer.committed([ck.TopicPartition(source, 0)], 10)
    assert committed[0].offset == 5
    consumer.close()
    assert sorted(read_all(txn_broker.bootstrap, sink, "read_committed", expected=5)) == [
        b"out-%d" % i for i in range(5)
    ]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(txn_broker):
    topic = create_topic(txn_broker.bootstrap, 1)
    zombie = producer(txn_broker.bootstrap, "ck-zombie")
    zombie.init_transactions(15)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(10)
    fresh = producer(txn_broker.bootstrap, "ck-zombie")
    fresh.init_transactions(30)  # aborts the zombie's open transaction
    with pytest.raises(ck.KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2")
        zombie.commit_transaction(15)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh")
    fresh.commit_transaction(15)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=1) == [b"fresh"]


def test_a_transaction_past_its_timeout_is_aborted_and_the_late_producer_fenced(txn_broker):
    topic = create_topic(txn_broker.bootstrap, 1)
    late = producer(txn_broker.bootstrap, "ck-timeout", **{"transaction.timeout.ms": 1000})
    late.init_transactions(15)
    late.begin_transaction()
    late.produce(topic, value=b"too-late")
    late.flush(10)
    time.sleep(1.0 + 4 * ABORT_TIMER_MS / 1000)  # the coordinator's timer aborts it, bumping the epoch
    with pytest.raises(ck.KafkaException):
        late.commit_transaction(15)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", idle_s=1.5) == []
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=1) == [b"too-late"]
