"""The seeds' failover stories on a real 3-broker cluster (processes, kill -9, SIGSTOP): replication
factor 3, min.insync.replicas 2, idempotent producers with acks=all (confluent-kafka and ours).

1. The leader replicates a batch and dies before answering (fault ``crash-after-replication``): the
   retry goes to the new leader, which answers it as a duplicate with the original offset.
2. The old leader comes back: it drops what only it had, takes its producer state from what it
   replicates, and once leader again answers a retry of a producer that wrote in its absence as a
   duplicate.
5. A zombie leader (SIGSTOP past the session timeout): writes go on at the new leader; what the
   zombie takes after SIGCONT is never acknowledged and never survives; it rejoins the ISR.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Producer
from tests.helpers.cluster import ClusterNodes
from tests.replication.cluster_ops import (
    FAST,
    create_topic,
    elect_preferred,
    idempotent_batch,
    init_producer_id,
    leader_of,
    partitions_of,
    produce_raw,
    read_all,
    wait_until,
)

from onceflow.client import Producer as OurProducer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.onceflow_only]

FAULT = "crash-after-replication"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = ClusterNodes(tmp_path_factory.mktemp("of-repl-failover"), 3, extra=FAST)
    try:
        yield nodes.start()
    finally:
        nodes.kill_all()  # a controlled shutdown of the last nodes would wait for a lost quorum


@pytest.fixture(autouse=True)
def healthy(cluster):
    """Each test starts and ends with every node up, unpaused, without faults."""
    yield
    for node in cluster.nodes.values():
        if node.running:
            os.killpg(node.pid, signal.SIGCONT)
        if node.extra_args or not node.running:
            node.extra_args = ()
            node.restart(90)


def confluent_producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "request.timeout.ms": 5000,
            "message.timeout.ms": 60000,
        }
    )


def send_one(producer: Producer, topic: str, value: bytes, timeout: float = 60) -> int:
    delivered = []
    producer.produce(
        topic, value=value, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg))
    )
    producer.flush(timeout)
    [(err, msg)] = delivered
    assert err is None, err
    return msg.offset()


def restart_with_fault(cluster: ClusterNodes, node_id: int, topic: str) -> None:
    """Node ``node_id``, the preferred leader of ``topic``, restarted with the fault and leading again."""
    node = cluster.nodes[node_id]
    node.stop(40)
    node.extra_args = ("--fault", f"{FAULT}=1")
    node.restart(90)
    wait_until(
        lambda: node_id in partitions_of(cluster.bootstrap, topic)[0].isr, 60, f"{node_id} back in the ISR"
    )
    elect_preferred(cluster.bootstrap, topic)
    wait_until(lambda: leader_of(cluster.bootstrap, topic) == node_id, 30, f"{node_id} leads {topic}")


@pytest.mark.parametrize("client", ["confluent-kafka", "onceflow"])
def test_a_retry_after_the_leader_died_is_answered_as_a_duplicate_with_the_original_offset(cluster, client):
    topic = f"story-1-{client}"
    create_topic(cluster.bootstrap, topic)
    leader = leader_of(cluster.bootstrap, topic)
    before = [b"before-%d" % i for i in range(3)]
    if client == "confluent-kafka":
        producer = confluent_producer(cluster.bootstrap)
        for value in before:
            send_one(producer, topic, value)
        restart_with_fault(cluster, leader, topic)
        offset = send_one(producer, topic, b"the-story")
    else:
        producer = OurProducer(
            bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all", request_timeout_ms=5000
        )
        for value in before:
            producer.send(topic, value, partition=0).get(60)
        restart_with_fault(cluster, leader, topic)
        offset = producer.send(topic, b"the-story", partition=0).get(90).offset
        producer.close()
    node = cluster.nodes[leader]
    wait_until(lambda: not node.running, 10, "the faulty leader died")
    assert f"fault {FAULT}" in node.log_text()
    assert leader_of(cluster.bootstrap, topic) != leader
    records = read_all(cluster.bootstrap, topic)[0]
    story = [o for o, v in records if v == b"the-story"]
    assert story == [offset]  # once, at the offset the dead leader gave it
    assert [v for _, v in records] == [*before, b"the-story"]


def test_the_old_leader_returns_with_producer_state_from_replication(cluster):
    topic = "story-2"
    create_topic(cluster.bootstrap, topic)
    state = partitions_of(cluster.bootstrap, topic)[0]
    old = state.leader
    followers = [b for b in state.replicas if b != old]
    # Records only the old leader gets: its followers are paused while it takes an acks=1 write, and
    # it dies before they fetch it.
    for b in followers:
        os.killpg(cluster.nodes[b].pid, signal.SIGSTOP)
    try:
        for i in range(3):
            assert (
                produce_raw(
                    cluster.nodes[old].bootstrap,
                    topic,
                    0,
                    idempotent_batch(
                        *init_producer_id(cluster.nodes[old].bootstrap), 0, [b"only-old-%d" % i]
                    ),
                    acks=1,
                )[0]
                == 0
            )
        cluster.nodes[old].kill9()
    finally:
        for b in followers:
            os.killpg(cluster.nodes[b].pid, signal.SIGCONT)
    new = wait_until(
        lambda: next((b for b in followers if leader_of(cluster.bootstrap, topic) == b), None),
        30,
        "a new leader",
    )
    # A producer writes while the old leader is away.
    address = cluster.nodes[new].bootstrap
    pid, epoch = init_producer_id(address)
    batches = [idempotent_batch(pid, epoch, seq, [b"absent-%d" % seq]) for seq in range(4)]
    offsets = []
    for batch in batches:
        error, offset = produce_raw(address, topic, 0, batch)
        assert error == 0
        offsets.append(offset)
    cluster.nodes[old].restart(90)
    wait_until(
        lambda: old in partitions_of(cluster.bootstrap, topic)[0].isr, 60, "the old leader back in the ISR"
    )
    elect_preferred(cluster.bootstrap, topic)
    wait_until(lambda: leader_of(cluster.bootstrap, topic) == old, 30, "the old leader leads again")
    # Its producer state came from replication: the retries are duplicates, with the original offsets.
    for batch, offset in zip(batches[1:], offsets[1:], strict=True):
        assert produce_raw(cluster.nodes[old].bootstrap, topic, 0, batch) == (0, offset)
    values = [v for _, v in read_all(cluster.bootstrap, topic)[0]]
    # Once each. What only the old leader had is gone; a follower's fetch already parked at the old
    # leader may have carried its first write before the follower stopped (then every replica has it).
    kept = [v for v in values if v.startswith(b"only-old-")]
    assert kept == [b"only-old-%d" % i for i in range(len(kept))] and len(kept) <= 1
    assert values[len(kept) :] == [b"absent-%d" % s for s in range(4)]


def test_a_zombie_leader_takes_nothing_that_survives(cluster):
    topic = "story-5"
    create_topic(cluster.bootstrap, topic)
    zombie = leader_of(cluster.bootstrap, topic)
    producer = confluent_producer(cluster.bootstrap)
    acked: list[bytes] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            value = b"steady-%d" % i
            producer.produce(
                topic,
                value=value,
                partition=0,
                on_delivery=lambda e, m, v=value: e is None and acked.append(v),
            )
            producer.poll(0.05)
            i += 1
        producer.flush(60)

    writer = threading.Thread(target=load)
    writer.start()
    zombie_answers: list = []
    try:
        time.sleep(2)
        os.killpg(cluster.nodes[zombie].pid, signal.SIGSTOP)
        # Requests that reach the zombie while it sleeps: it takes them when it wakes, before it
        # hears that it lost the leadership.
        address = cluster.nodes[zombie].bootstrap
        pid, epoch = init_producer_id(cluster.nodes[next(b for b in cluster.nodes if b != zombie)].bootstrap)
        stale = threading.Thread(
            target=lambda: zombie_answers.append(
                produce_raw(address, topic, 0, idempotent_batch(pid, epoch, 0, [b"zombie"]), timeout_ms=3000)
            )
        )
        stale.start()
        others = ",".join(n.bootstrap for b, n in cluster.nodes.items() if b != zombie)  # it cannot answer
        wait_until(lambda: leader_of(others, topic) != zombie, 30, "a new leader")
        time.sleep(2)  # writes go on at the new leader
        os.killpg(cluster.nodes[zombie].pid, signal.SIGCONT)
        stale.join(60)
        wait_until(
            lambda: zombie in partitions_of(cluster.bootstrap, topic)[0].isr, 60, "the zombie back in the ISR"
        )
        time.sleep(1)
    finally:
        stop.set()
        writer.join(120)
    assert zombie_answers and zombie_answers[0][0] != 0  # never acknowledged
    values = [v for _, v in read_all(cluster.bootstrap, topic)[0]]
    assert b"zombie" not in values
    assert len(values) == len(set(values))
    assert set(acked) <= set(values)
    assert len(acked) > 10
