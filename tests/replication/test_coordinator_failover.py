"""Coordinators fail over with their partitions (tests 4 and 7 of the replication issue), on one
3-broker cluster (replication factor 3 for the internal topics, min.insync.replicas 2):

4. The transaction coordinator's broker dies (fault ``crash-after-prepare``) once PrepareCommit is in
   ``__transaction_state`` and before any marker: the broker that leads the partition next loads it
   from its replica, finishes the commit, and a read_committed consumer sees the transaction whole,
   once.
7. Kafka's copier workload (three transactional copiers, a read_committed group, offsets sent to the
   transactions) while brokers are killed (kill -9) and restarted in turn, so every coordinator
   partition changes leader: the output equals the input, nothing twice, nothing aborted read.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Producer
from tests.helpers.cluster import ClusterNodes
from tests.replication.cluster_ops import (
    FAST,
    create_topic,
    elect_preferred,
    partitions_of,
    read_all,
    wait_until,
)
from tests.transactions.test_copier import Monitor, _kill9, _seed, _start_copier

from onceflow.broker.txn.config import partition_for_key
from onceflow.protocol.errors import ErrorCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.onceflow_only]

TRANSACTION_STATE = "__transaction_state"
FAULT = "crash-after-prepare"
COPIER_RECORDS = 60_000
ROLLING_KILLS = 4  # more than the three brokers: every one dies once, one twice


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Two __transaction_state partitions: one broker of three coordinates no transaction (see
    # test_every_brokers_transactions_are_listed_once).
    nodes = ClusterNodes(
        tmp_path_factory.mktemp("of-repl-coord"),
        3,
        extra={**FAST, "transaction.state.log.num.partitions": "2"},
    )
    try:
        yield nodes.start()
    finally:
        nodes.kill_all()  # a controlled shutdown of the last nodes would wait for a lost quorum


@pytest.fixture(autouse=True)
def healthy(cluster):
    """Each test starts and ends with every node up, without faults."""
    yield
    for node in cluster.nodes.values():
        if node.extra_args or not node.running:
            node.extra_args = ()
            node.restart(90)


def transactional_producer(bootstrap: str, tid: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 0,
            "transaction.timeout.ms": 60000,
            "metadata.recovery.strategy": "none",  # see tests.transactions.copier_worker
        }
    )


def coordinator_partition(bootstrap: str, tid: str) -> int:
    partitions = partitions_of(bootstrap, TRANSACTION_STATE)
    return partition_for_key(tid, len(partitions))


def _key_led_by(bootstrap: str, topic: str, prefix: str, wanted) -> str:
    """The first ``prefix-<n>`` whose ``topic`` partition is led by a broker ``wanted(leader)`` accepts."""
    partitions = partitions_of(bootstrap, topic)
    for n in range(1000):
        key = f"{prefix}-{n}"
        if wanted(partitions[partition_for_key(key, len(partitions))].leader):
            return key
    raise AssertionError(f"no {prefix} key led as wanted")


def test_offsets_sent_to_a_transaction_coordinated_by_another_broker(cluster):
    """TxnOffsetCommit at the group's coordinator, for a transaction another broker coordinates: the
    group coordinator asks the transaction's (AddPartitionsToTxn v5), and the offsets are committed
    with the transaction."""
    from confluent_kafka import Consumer, TopicPartition

    topic = "coord-offsets"
    create_topic(cluster.bootstrap, topic, 1)
    warmup = transactional_producer(cluster.bootstrap, "coord-offsets-warmup")
    warmup.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "coord-offsets-probe"})
    consumer.committed([TopicPartition(topic, 0)], 30)  # creates __consumer_offsets
    consumer.close()
    wait_until(lambda: partitions_of(cluster.bootstrap, "__consumer_offsets"), 30, "__consumer_offsets")
    group = _key_led_by(cluster.bootstrap, "__consumer_offsets", "coord-offsets-group", lambda b: b > 0)
    group_leader = partitions_of(cluster.bootstrap, "__consumer_offsets")[
        partition_for_key(group, len(partitions_of(cluster.bootstrap, "__consumer_offsets")))
    ].leader
    tid = _key_led_by(
        cluster.bootstrap, TRANSACTION_STATE, "coord-offsets-txn", lambda b: b not in (-1, group_leader)
    )
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    wait_until(lambda: consumer.poll(0.2) is not None or consumer.assignment(), 60, "the group joined")
    producer = transactional_producer(cluster.bootstrap, tid)
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 60
    )
    producer.commit_transaction(60)
    consumer.close()
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        [committed] = wait_until(
            lambda: [tp for tp in reader.committed([TopicPartition(topic, 0)], 10) if tp.offset == 42],
            30,
            "the transaction's offset committed",
        )
    finally:
        reader.close()
    assert committed.offset == 42


def test_every_brokers_transactions_are_listed_once(cluster):
    """ListTransactions across the cluster (our admin, as ``onceflow txn list``): ``__transaction_state``
    has two partitions here, so one broker of three leads none, and answers an empty list as Kafka's
    does (it answered NOT_COORDINATOR, failing the whole listing); each open transaction is listed
    once, by its coordinator."""
    from tests.helpers.cluster import request

    from onceflow.client.admin import AdminClient

    warmup = transactional_producer(cluster.bootstrap, "list-warmup")
    warmup.init_transactions(60)  # creates __transaction_state
    wait_until(
        lambda: all(p.leader >= 0 for p in partitions_of(cluster.bootstrap, TRANSACTION_STATE).values()),
        60,
        f"{TRANSACTION_STATE} led",
    )
    coordinators = sorted({p.leader for p in partitions_of(cluster.bootstrap, TRANSACTION_STATE).values()})
    idle = [node for node in cluster.nodes if node not in coordinators]
    assert idle, "a broker leading no __transaction_state partition"
    topic = "list-txn"
    create_topic(cluster.bootstrap, topic, 1)
    tids = [
        _key_led_by(cluster.bootstrap, TRANSACTION_STATE, "list-txn", lambda b, c=c: b == c)
        for c in coordinators
    ]
    producers = []
    for tid in tids:
        producer = transactional_producer(cluster.bootstrap, tid)
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, tid.encode(), partition=0)
        producer.flush(60)
        producers.append(producer)
    try:
        for node in idle:
            response = asyncio.run(request(cluster.nodes[node].bootstrap, _list_all(), 0))
            assert (response.error_code, response.transaction_states) == (ErrorCode.NONE, [])
        with AdminClient(cluster.bootstrap) as admin:
            listed = [t.transactional_id for t in admin.list_transactions(["Ongoing"])]
        assert sorted(t for t in listed if t.startswith("list-txn")) == sorted(tids)
    finally:
        for producer in producers:
            producer.abort_transaction(60)


def test_a_new_coordinator_finishes_a_commit_left_in_prepare(cluster):
    topic = "coord-4"
    create_topic(cluster.bootstrap, topic, 3)
    warmup = transactional_producer(cluster.bootstrap, "coord-4-warmup")
    warmup.init_transactions(60)  # creates __transaction_state (replication factor 3)
    tid = "coord-4-txn"
    index = coordinator_partition(cluster.bootstrap, tid)
    wait_until(
        lambda: len(partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].isr) == 3,
        60,
        f"{TRANSACTION_STATE}-{index} in sync",
    )
    # The partition's preferred leader is restarted with the fault and made its leader again.
    coordinator = partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].replicas[0]
    node = cluster.nodes[coordinator]
    node.stop(40)
    node.extra_args = ("--fault", f"{FAULT}=1")
    node.restart(90)
    wait_until(
        lambda: coordinator in partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].isr,
        60,
        "the coordinator back in the ISR",
    )
    elect_preferred(cluster.bootstrap, TRANSACTION_STATE, index)
    wait_until(
        lambda: partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].leader == coordinator,
        30,
        f"{coordinator} leads {TRANSACTION_STATE}-{index}",
    )

    producer = transactional_producer(cluster.bootstrap, tid)
    producer.init_transactions(60)
    producer.begin_transaction()
    values = [b"txn-%d" % i for i in range(30)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 3)
    producer.flush(60)
    # EndTxn is answered once PrepareCommit is in the log; the markers come after, and the fault
    # kills the coordinator before the first.
    producer.commit_transaction(120)
    wait_until(lambda: not node.running, 30, "the coordinator died")
    assert f"fault {FAULT}" in node.log_text()
    wait_until(
        lambda: partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].leader not in (-1, coordinator),
        30,
        "a new coordinator",
    )

    def committed_values():
        committed = read_all(cluster.bootstrap, topic, 3, isolation="read_committed")
        return sorted(v for records in committed.values() for _o, v in records)

    # The new coordinator finds the transaction in PrepareCommit and writes the markers: the
    # transaction becomes visible whole, once.
    wait_until(lambda: committed_values() == sorted(values), 60, "the transaction committed")
    # The producer goes on with the new coordinator.
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(60)
    wait_until(lambda: committed_values() == sorted([*values, b"after"]), 60, "the next transaction")


def test_the_old_coordinator_answers_not_coordinator(cluster):
    """A preferred election moves a ``__transaction_state`` partition from the broker that loaded it
    (after the previous test's failover) back to its preferred replica: the old coordinator unloads
    it and answers NOT_COORDINATOR, the new one serves the same transactional id."""
    from kafka.protocol.producer import InitProducerIdRequest
    from tests.helpers.cluster import request

    tid = "coord-4-txn"
    index = coordinator_partition(cluster.bootstrap, tid)
    view = partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index]
    preferred = view.replicas[0]
    if view.leader == preferred:  # move it away first (a controlled restart of the preferred leader)
        cluster.nodes[preferred].stop(40)
        cluster.nodes[preferred].restart(90)
    wait_until(
        lambda: len(partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].isr) == 3, 60, "in sync"
    )
    old = partitions_of(cluster.bootstrap, TRANSACTION_STATE)[index].leader
    assert old != preferred
    producer = transactional_producer(cluster.bootstrap, tid)
    producer.init_transactions(60)  # served by the old coordinator
    elect_preferred(cluster.bootstrap, TRANSACTION_STATE, index)
    wait_until(
        lambda: partitions_of(cluster.nodes[old].bootstrap, TRANSACTION_STATE)[index].leader == preferred,
        30,
        "the old coordinator hears of the new leader",
    )
    body = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    response = asyncio.run(request(cluster.nodes[old].bootstrap, body, 4))
    assert response.error_code == ErrorCode.NOT_COORDINATOR
    producer.begin_transaction()  # the producer finds the new coordinator
    producer.produce("coord-4", b"moved", partition=0)
    producer.commit_transaction(60)
    _a_stale_coordinators_markers_are_fenced(cluster, tid)


def _a_stale_coordinators_markers_are_fenced(cluster, tid: str) -> None:
    """The commit's marker carried the new coordinator's epoch (the partition's leader epoch, which
    the election raised). WriteTxnMarkers from an older coordinator epoch, for the same producer, is
    refused by the data partition's leader with TRANSACTION_COORDINATOR_FENCED (Kafka's check in the
    producer state) and writes nothing."""
    from kafka.protocol.producer import WriteTxnMarkersRequest
    from tests.helpers.cluster import request

    from onceflow.client.admin import AdminClient
    from onceflow.client.consumer.structs import TopicPartition

    with AdminClient(cluster.bootstrap) as admin:
        description = admin.describe_transaction(tid)
        [state] = [
            p
            for p in admin.describe_producers(TopicPartition("coord-4", 0))
            if p.producer_id == description.producer_id
        ]
        assert state.coordinator_epoch >= 1  # the election moved the coordinator
        leader = partitions_of(cluster.bootstrap, "coord-4")[0].leader

        def markers(coordinator_epoch: int):
            m = WriteTxnMarkersRequest.WritableTxnMarker
            body = WriteTxnMarkersRequest(
                markers=[
                    m(
                        producer_id=description.producer_id,
                        producer_epoch=description.producer_epoch,
                        transaction_result=False,
                        topics=[m.WritableTxnMarkerTopic(name="coord-4", partition_indexes=[0])],
                        coordinator_epoch=coordinator_epoch,
                    )
                ]
            )
            response = asyncio.run(request(cluster.nodes[leader].bootstrap, body, 1))
            return response.markers[0].topics[0].partitions[0].error_code

        assert markers(state.coordinator_epoch - 1) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        [after] = [
            p
            for p in admin.describe_producers(TopicPartition("coord-4", 0))
            if p.producer_id == description.producer_id
        ]
        assert after == state  # nothing written for the stale marker


def test_the_copier_workload_through_rolling_broker_kills(cluster, tmp_path):
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "copier-in", 3)
    create_topic(bootstrap, "copier-out", 3)
    _seed_n(bootstrap, "copier-in", COPIER_RECORDS)
    monitor = Monitor(bootstrap, "copier-out")
    monitor.start()
    copiers: list[subprocess.Popen] = []
    kills = copier_exits = 0
    try:
        copiers = [
            _start_copier(bootstrap, "copier-in", "copier-out", "copiers", i, tmp_path) for i in range(3)
        ]
        deadline = time.monotonic() + 300
        next_kill = time.monotonic() + 3
        # Until every record is copied and every kill done (a kill after the copy still moves the
        # coordinators of idle copiers, which must then carry on).
        while time.monotonic() < deadline and (
            len(set(monitor.values)) < COPIER_RECORDS or kills < ROLLING_KILLS
        ):
            time.sleep(1.0)
            for i, proc in enumerate(copiers):  # a copier that died of a fatal error comes back
                if proc.poll() is not None:
                    copiers[i] = _start_copier(bootstrap, "copier-in", "copier-out", "copiers", i, tmp_path)
                    copier_exits += 1
            if kills < ROLLING_KILLS and time.monotonic() > next_kill:
                node = cluster.nodes[1 + kills % 3]
                node.kill9()
                time.sleep(2)
                node.restart(90)
                wait_until(
                    lambda: all(
                        len(p.isr) == 3 for p in partitions_of(bootstrap, TRANSACTION_STATE).values()
                    ),
                    60,
                    "the coordinators' partitions in sync again",
                )
                kills += 1
                next_kill = time.monotonic() + 2
        time.sleep(3)
        print(f"copier workload on the cluster: {kills} broker kill -9s, {copier_exits} copier restarts")
        assert kills == ROLLING_KILLS
        monitor.stop.set()
        monitor.join(30)
        seen = monitor.values
        assert len(seen) == len(set(seen)), f"read_committed saw {len(seen) - len(set(seen))} records twice"
        # Every partition read up to its end (its last stable offset), however its leader moved.
        final = [
            v
            for records in read_all(bootstrap, "copier-out", 3, isolation="read_committed").values()
            for _o, v in records
        ]
        assert len(final) == COPIER_RECORDS, f"output has {len(final)} records, input {COPIER_RECORDS}"
        assert sorted(final) == [b"%06d" % i for i in range(COPIER_RECORDS)]
    finally:
        monitor.stop.set()
        for proc in copiers:
            _kill9(proc)


def _seed_n(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records as the copier test seeds them (``%06d`` values over three partitions)."""
    import tests.transactions.test_copier as copier_test

    saved = copier_test.RECORDS
    copier_test.RECORDS = count
    try:
        _seed(bootstrap, topic)
    finally:
        copier_test.RECORDS = saved


def _list_all():
    from kafka.protocol.admin import ListTransactionsRequest

    return ListTransactionsRequest(
        state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=None
    )
