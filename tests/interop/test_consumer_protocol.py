"""The consumer group protocol (KIP-848) with a client nobody here wrote: librdkafka's consumer with
``group.protocol=consumer`` (confluent-kafka), and the answers it hides, at the wire."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import WireClient
from tests.interop.test_groups_wire import commit_request

from onceflow.protocol.errors import ErrorCode as E
from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

pytestmark = pytest.mark.interop

HEARTBEAT_MS = 200


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("kip848"),
        extra_args=["--dev", "--config", f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}"],
    )
    proc.start()
    yield proc
    proc.stop()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, b"%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0


def poll_until(c: Consumer, done, timeout: float = 30.0, seen: list | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; assignment {c.assignment()}"
        msg = c.poll(0.1)
        if msg is not None and seen is not None:
            assert msg.error() is None, msg.error()
            seen.append((msg.partition(), msg.offset()))


def partitions_of(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def read_all(bootstrap: str, partitions: int, per_partition: int) -> tuple[str, Consumer, list]:
    """A new filled topic, and a consumer of the group ``g-<topic>`` that has read all of it:
    (topic, consumer, [(partition, offset)]). The caller closes the consumer."""
    topic = topic_name("k848")
    create_topic(bootstrap, topic, partitions=partitions)
    fill(bootstrap, topic, partitions, per_partition)
    c = consumer(bootstrap, f"g-{topic}")
    seen: list = []
    try:
        c.subscribe([topic])
        poll_until(c, lambda: len(seen) >= partitions * per_partition, seen=seen)
    except BaseException:
        c.close()
        raise
    return topic, c, seen


def test_one_consumer_gets_every_partition_and_reads_it_all(kip848_broker):
    _, c, seen = read_all(kip848_broker.bootstrap, 3, 20)
    try:
        assert sorted(seen) == sorted((p, o) for p in range(3) for o in range(20))
        assert partitions_of(c) == {0, 1, 2}
    finally:
        c.close()


def test_two_consumers_share_the_partitions_and_the_survivor_takes_them_back(kip848_broker):
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=4)
    group = f"g-{topic}"
    first, second = consumer(b, group), consumer(b, group)
    try:
        first.subscribe([topic])
        poll_until(first, lambda: partitions_of(first) == {0, 1, 2, 3})
        second.subscribe([topic])
        # One thread polls both: librdkafka serves a handle's rebalance in its poll calls, and a call
        # such as assignment() on a handle another thread is polling can block until that poll ends.
        deadline = time.monotonic() + 30
        while not (
            len(partitions_of(first)) == len(partitions_of(second)) == 2
            and not partitions_of(first) & partitions_of(second)
        ):
            assert time.monotonic() < deadline, (partitions_of(first), partitions_of(second))
            first.poll(0.05)
            second.poll(0.05)
        assert partitions_of(first) | partitions_of(second) == {0, 1, 2, 3}
        second.close()
        poll_until(first, lambda: partitions_of(first) == {0, 1, 2, 3})
    finally:
        first.close()


def test_commits_carry_the_member_epoch(kip848_broker):
    b = kip848_broker.bootstrap
    topic, c, _ = read_all(b, 2, 5)
    try:
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 5)]
        # A commit without a member epoch is refused while the group has members (Kafka's rule).
        with WireClient(b) as w:
            resp = w.request(commit_request(f"g-{topic}", topic, [(0, 1)]), 9)
            assert resp.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
    finally:
        c.close()


def join_request(group: str, member: str, topic: str, epoch: int = 0, **kw) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 30000 if epoch == 0 else -1),
        subscribed_topic_names=[topic] if epoch == 0 else None,
        topic_partitions=[] if epoch == 0 else None,
        **kw,
    )


def test_heartbeat_epochs_and_offset_checks_at_the_wire(kip848_broker):
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=2)
    group = f"g-{topic}"
    member = uuid.uuid4().hex
    with WireClient(b) as w:
        joined = w.request(join_request(group, member, topic), 1)
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, member, 1)
        assert joined.heartbeat_interval_ms == HEARTBEAT_MS
        assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
        # v0: the coordinator names a member that joins with an empty id.
        v0 = w.request(join_request(group, "", topic), 0)
        assert v0.error_code == 0 and v0.member_id and v0.member_id != member
        ahead = w.request(join_request(group, member, topic, epoch=5), 1)
        assert ahead.error_code == E.FENCED_MEMBER_EPOCH
        unknown = w.request(join_request(group, "nobody", topic, epoch=1), 1)
        assert unknown.error_code == E.UNKNOWN_MEMBER_ID
        bad = w.request(join_request(group, member, topic, server_assignor="sticky"), 1)
        assert bad.error_code == E.UNSUPPORTED_ASSIGNOR and "sticky" in bad.error_message
        stale = w.request(commit_request(group, topic, [(0, 3)], generation=0, member=member), 9)
        assert stale.topics[0].partitions[0].error_code == E.STALE_MEMBER_EPOCH
        ok = w.request(commit_request(group, topic, [(0, 3)], generation=1, member=member), 9)
        assert ok.topics[0].partitions[0].error_code == 0
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        fetch = OffsetFetchRequest(
            groups=[G(group_id=group, member_id=member, member_epoch=0, topics=None)], require_stable=False
        )
        assert w.request(fetch, 9).groups[0].error_code == E.STALE_MEMBER_EPOCH
        left = w.request(join_request(group, member, topic, epoch=-1), 1)
        assert (left.error_code, left.member_epoch) == (0, -1)


def test_a_member_must_commit_with_offset_commit_v9_at_the_wire(kip848_broker):
    """Kafka's rule: OffsetCommit below v9 carries no member epoch, so a consumer-protocol member's
    commit at v8 is UNSUPPORTED_VERSION in every partition, even at the right epoch; OffsetFetch has
    no such rule (below v9 it names no member)."""
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=2)
    group = f"g-{topic}"
    member = uuid.uuid4().hex
    with WireClient(b) as w:
        joined = w.request(join_request(group, member, topic), 1)
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        old = w.request(commit_request(group, topic, [(0, 4), (1, 4)], generation=1, member=member), 8)
        assert [p.error_code for p in old.topics[0].partitions] == [E.UNSUPPORTED_VERSION] * 2
        # Without a member it is the group's non-emptiness that refuses it, as at v9.
        simple = w.request(commit_request(group, topic, [(0, 4)]), 8)
        assert simple.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
        ok = w.request(commit_request(group, topic, [(0, 7)], generation=1, member=member), 9)
        assert ok.topics[0].partitions[0].error_code == 0
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        fetch = OffsetFetchRequest(
            group_id=group, topics=[T(name=topic, partition_indexes=[0, 1])], require_stable=False
        )
        fetched = w.request(fetch, 7)
        assert fetched.error_code == 0
        # Partition 1 was only in the refused v8 commit: nothing was stored for it.
        assert [p.committed_offset for p in fetched.topics[0].partitions] == [7, -1]
        left = w.request(join_request(group, member, topic, epoch=-1), 1)
        assert left.error_code == 0


def test_consumer_group_describe_v1_gives_each_members_type_at_the_wire(kip848_broker):
    """ConsumerGroupDescribe v1 (KIP-1099) is advertised and answers MemberType 1 (consumer protocol)
    for every member; a v0 answer has no such field (read as -1, unknown)."""
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=1)
    group = f"g-{topic}"
    member = uuid.uuid4().hex
    with WireClient(b) as w:
        versions = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert {(k.min_version, k.max_version) for k in versions.api_keys if k.api_key == 69} == {(0, 1)}
        assert w.request(join_request(group, member, topic), 1).error_code == 0
        ask = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        (described,) = w.request(ask, 1).groups
        assert described.error_code == 0
        assert [(m.member_id, m.member_type) for m in described.members] == [(member, 1)]
        assert [m.member_type for m in w.request(ask, 0).groups[0].members] == [-1]
        assert w.request(join_request(group, member, topic, epoch=-1), 1).error_code == 0


def test_a_classic_group_with_members_keeps_its_protocol(kip848_broker):
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=1)
    group = f"g-{topic}"
    classic = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        classic.subscribe([topic])
        poll_until(classic, lambda: partitions_of(classic) == {0})
        with WireClient(b) as w:
            resp = w.request(join_request(group, uuid.uuid4().hex, topic), 1)
            assert resp.error_code == E.GROUP_ID_NOT_FOUND
            ask = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
            assert w.request(ask, 0).groups[0].error_code == E.GROUP_ID_NOT_FOUND
        # Admin clients still describe it, as a classic group.
        admin = AdminClient({"bootstrap.servers": b})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert (described.type.name, described.state.name) == ("CLASSIC", "STABLE")
    finally:
        classic.close()


def test_read_process_write_exactly_once_with_a_consumer_protocol_group(kip848_broker):
    """sendOffsetsToTransaction with the member's group metadata (member id + epoch, KIP-447's fencing
    under KIP-848): offsets commit with the transaction, and a departed member's metadata is refused."""
    b = kip848_broker.bootstrap
    source, sink = topic_name("k848-in"), topic_name("k848-out")
    create_topic(b, source, partitions=2)
    create_topic(b, sink, partitions=1)
    fill(b, source, 2, 50)
    group = f"g-{source}"
    c = consumer(b, group, **{"isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": b, "transactional.id": f"tx-{source}"})
    producer.init_transactions(30)
    try:
        c.subscribe([source])
        copied = 0
        deadline = time.monotonic() + 60
        while copied < 100:
            assert time.monotonic() < deadline
            batch = [m for m in c.consume(50, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value())
            ends = {}
            for m in batch:
                ends[m.partition()] = m.offset() + 1
            offsets = [TopicPartition(source, p, o) for p, o in ends.items()]
            producer.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            copied += len(batch)
        committed = c.committed([TopicPartition(source, 0), TopicPartition(source, 1)], timeout=10)
        assert [tp.offset for tp in committed] == [50, 50]
        stale = c.consumer_group_metadata()
    finally:
        c.close()
    producer.begin_transaction()
    with pytest.raises(KafkaException) as info:
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 1)], stale, 30)
    assert info.value.args[0].code() == E.UNKNOWN_MEMBER_ID
    producer.abort_transaction(30)


def test_admin_lists_describes_and_deletes_consumer_groups(kip848_broker):
    b = kip848_broker.bootstrap
    topic = topic_name("k848")
    create_topic(b, topic, partitions=1)
    fill(b, topic, 1, 3)
    group = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": b})
    c = consumer(b, group)
    try:
        c.subscribe([topic])
        seen: list = []
        poll_until(c, lambda: len(seen) >= 3, seen=seen)
        c.commit(asynchronous=False)
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(30).valid}
        assert listed[group].type.name == "CONSUMER"
        assert listed[group].state.name == "STABLE"
        # librdkafka asks with ConsumerGroupDescribe (API 69) and falls back to DescribeGroups for
        # classic groups, which ConsumerGroupDescribe answers GROUP_ID_NOT_FOUND.
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert (described.type.name, described.state.name, described.partition_assignor) == (
            "CONSUMER",
            "STABLE",
            "uniform",
        )
        (member,) = described.members
        assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [(topic, 0)]
        assert [(tp.topic, tp.partition) for tp in member.target_assignment.topic_partitions] == [(topic, 0)]
        busy = admin.delete_consumer_groups([group])[group]
        with pytest.raises(KafkaException) as info:
            busy.result(30)
        assert info.value.args[0].code() == E.NON_EMPTY_GROUP
    finally:
        c.close()
    admin.delete_consumer_groups([group])[group].result(30)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}


def test_a_member_carries_on_across_a_broker_restart(tmp_path):
    """The group is persisted in __consumer_offsets: after a restart the member keeps its epoch and
    partitions (no rejoin), and reading continues with nothing read twice (a regex subscription)."""
    proc = BrokerProcess(
        tmp_path / "data",
        extra_args=["--dev", "--config", f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}"],
    )
    proc.start()
    c = None
    try:
        b = proc.bootstrap
        topic = topic_name("k848r")
        create_topic(b, topic, partitions=2)
        fill(b, topic, 2, 5)
        c = consumer(b, f"g-{topic}")
        c.subscribe([f"^{topic}$"])
        seen: list = []
        poll_until(c, lambda: len(seen) >= 10, seen=seen)
        c.commit(asynchronous=False)
        admin = AdminClient({"bootstrap.servers": b})  # kept: its futures need the client alive
        (member_before,) = admin.describe_consumer_groups([f"g-{topic}"])[f"g-{topic}"].result(30).members
        proc.stop()
        proc.start()
        fill(b, topic, 2, 5)
        poll_until(c, lambda: len(seen) >= 20, timeout=60, seen=seen)
        assert sorted(seen) == sorted((p, o) for p in range(2) for o in range(10))  # nothing twice
        assert partitions_of(c) == {0, 1}
        # A fresh admin client: librdkafka's own may still hold its pre-restart coordinator handle
        # (it re-bootstraps when every broker was down; see test_copier's docstring).
        admin = AdminClient({"bootstrap.servers": b})
        (member_after,) = admin.describe_consumer_groups([f"g-{topic}"])[f"g-{topic}"].result(30).members
        assert member_after.member_id == member_before.member_id  # the same member: no rejoin
    finally:
        if c is not None:
            c.close()
        proc.stop()


def test_a_static_member_gets_its_partitions_back_without_a_rebalance(kip848_broker):
    """group.instance.id: closing sends epoch -2, the instance's partitions stay reserved (the other
    member does not get them), and the restarted instance, under a new member id, has them again."""
    b = kip848_broker.bootstrap
    topic = topic_name("k848s")
    create_topic(b, topic, partitions=4)
    group = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": b})

    def static(instance: str) -> Consumer:
        c = consumer(b, group, **{"group.instance.id": instance})
        c.subscribe([topic])
        return c

    def settle(consumers, seconds: float) -> list[set[int]]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in consumers:
                c.poll(0.05)
        return [partitions_of(c) for c in consumers]

    first, second = static("i1"), static("i2")
    try:
        deadline = time.monotonic() + 30
        while sorted(map(len, settle([first, second], 0.2))) != [2, 2]:
            assert time.monotonic() < deadline
        held_by_first = partitions_of(first)
        first.close()
        assert settle([second], 1.0) == [{0, 1, 2, 3} - held_by_first]  # nothing moves to the other
        first = static("i1")
        deadline = time.monotonic() + 30
        while partitions_of(first) != held_by_first:
            assert time.monotonic() < deadline
            settle([first, second], 0.2)
        after = admin.describe_consumer_groups([group])[group].result(30)
        assert sorted(m.group_instance_id for m in after.members) == ["i1", "i2"]
    finally:
        first.close()
        second.close()
