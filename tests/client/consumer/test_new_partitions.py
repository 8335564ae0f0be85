"""Partitions added to a subscribed topic reach the group.

Classic protocol: Kafka's rule (ConsumerCoordinator's MetadataSnapshot) — the leader keeps the partition
counts it assigned with and rejoins when a later metadata refresh (every metadata.max.age.ms) differs;
followers check nothing. The rule itself without a broker (:mod:`onceflow.client.consumer.metadata_watch`
and the membership), then end to end against our broker for both group protocols (KIP-848: the
coordinator notices the new partitions itself and bumps the group epoch).
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from kafka.protocol.consumer import JoinGroupResponse, SyncGroupResponse
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncAdminClient, AsyncClient
from onceflow.client.async_client import LATEST_TIMESTAMP, ClusterMetadata, PartitionInfo, TopicInfo
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.consumer.classic.assignors import (
    Assignment,
    RangeAssignor,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from onceflow.client.consumer.classic.membership import GroupMembership, MemberState
from onceflow.client.consumer.metadata_watch import MetadataWatch, partition_counts
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.record_codec import encode_batch

# -- the rule, no broker -------------------------------------------------------------------------


def cluster(**topics: int | ErrorCode) -> ClusterMetadata:
    """Metadata describing ``topic=partition count`` (or ``topic=ErrorCode`` for a topic-level error)."""
    infos = {}
    for name, spec in topics.items():
        if isinstance(spec, ErrorCode):
            infos[name] = TopicInfo(name, {}, error=spec)
        else:
            infos[name] = TopicInfo(
                name, {p: PartitionInfo(p, 0, [0], [0], ErrorCode.NONE) for p in range(spec)}
            )
    return ClusterMetadata(brokers={0: ("127.0.0.1", 9092)}, topics=infos)


def test_partition_counts_count_a_missing_or_failed_topic_as_none():
    md = cluster(a=3, b=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert partition_counts(md, ["a", "b", "c"]) == {"a": 3, "b": 0, "c": 0}


def test_the_leaders_snapshot_changes_when_partitions_are_added_or_a_topic_goes():
    w = MetadataWatch()
    w.assignment_made(w.next_version(), {"a": 1, "b": 2})
    assert not w.changed() and w.topics == {"a", "b"}
    w.update(w.next_version(), {"a": 1, "b": 2})
    assert not w.changed()
    w.update(w.next_version(), {"a": 3, "b": 2})  # CreatePartitions on a
    assert w.changed() and w.describe() == "a: 1 -> 3"
    w.update(w.next_version(), {"a": 1})  # b no longer described (deleted): no partitions
    assert w.changed() and w.describe() == "b: 2 -> 0"
    w.update(w.next_version(), {"a": 1, "b": 2, "c": 5})  # a topic nobody in the group subscribed to
    assert not w.changed()


def test_a_topic_missing_when_assigning_rebalances_the_group_when_it_appears():
    w = MetadataWatch()
    w.assignment_made(w.next_version(), {"a": 0})
    w.update(w.next_version(), {"a": 0})
    assert not w.changed()
    w.update(w.next_version(), {"a": 4})
    assert w.changed()


def test_metadata_requested_before_the_snapshot_was_taken_is_ignored():
    """A refresh sent before the leader's assignment but answered after it is older than the snapshot:
    it must not make the freshly assigned group rebalance (Kafka's metadata update version)."""
    w = MetadataWatch()
    stale = w.next_version()  # a periodic refresh goes out, then partitions are added
    w.assignment_made(w.next_version(), {"a": 3})  # the leader assigns with the new count
    w.update(stale, {"a": 1})  # the refresh's answer, from before
    assert not w.changed()


def test_a_follower_watches_nothing():
    w = MetadataWatch()
    w.assignment_made(w.next_version(), {"a": 1})
    w.joined(is_leader=True)
    w.update(w.next_version(), {"a": 2})
    assert w.changed()
    w.joined(is_leader=False)  # the next round had another leader
    assert not w.changed() and w.topics == frozenset()


def join_response(leader: str, generation: int, members=()):
    return JoinGroupResponse(
        error_code=0,
        generation_id=generation,
        protocol_name="range",
        leader=leader,
        member_id="me",
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, metadata=encode_subscription(s))
            for m, s in members
        ],
    )


def sync_response(partitions):
    return SyncGroupResponse(error_code=0, assignment=encode_assignment(Assignment(partitions)))


def test_the_leader_rejoins_when_a_subscribed_topic_grows_and_a_follower_does_not():
    m = GroupMembership("g", [RangeAssignor()])
    m.join_request(["a"])
    joined = m.on_join_response(
        join_response("me", 1, [("me", Subscription(["a"])), ("other", Subscription(["b"]))])
    )
    version = m.metadata_watch.next_version()
    counts = partition_counts(cluster(a=1, b=1), ["a", "b"])
    m.compute_assignments(joined.members, counts)
    m.metadata_watch.assignment_made(version, counts)
    m.on_sync_response(sync_response([TP("a", 0)]))
    assert m.state is MemberState.STABLE and m.metadata_watch.topics == {"a", "b"}
    m.metadata_watch.update(m.metadata_watch.next_version(), {"a": 1, "b": 1})
    assert not m.check_metadata() and not m.rejoin_needed
    # The other member's topic grows: the leader watches the whole group's topics.
    m.metadata_watch.update(m.metadata_watch.next_version(), {"a": 1, "b": 3})
    assert m.check_metadata() and m.rejoin_needed

    # Next round, someone else leads: this member stops watching, whatever the metadata says.
    m.join_request(["a"])
    m.on_join_response(join_response("other", 2))
    m.on_sync_response(sync_response([TP("a", 0)]))
    m.metadata_watch.update(m.metadata_watch.next_version(), {"a": 7, "b": 0})
    assert not m.check_metadata() and not m.rejoin_needed


# -- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("new-partitions"),
        extra_args=["--config", "group.initial.rebalance.delay.ms=0"],
    )
    proc.start()
    yield proc
    proc.stop()


def test_a_client_whose_cached_metadata_predates_new_partitions_still_reaches_them(broker):
    """The consumer's positions (ListOffsets) and produce go to a partition's leader through the
    client's cached metadata: a partition the cache does not know yet makes it ask again."""
    topic = topic_name("stale-cache")

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
            assert sorted((await client.metadata([topic])).topics[topic].partitions) == [0]
            async with AsyncAdminClient(broker.bootstrap) as admin:
                await admin.create_partitions(topic, 3)
            await client.produce(topic, 2, encode_batch([(None, b"x")]))
            return await client.list_offsets(topic, [1, 2], timestamp=LATEST_TIMESTAMP)

    assert asyncio.run(run()) == {1: 0, 2: 1}


DEADLINE_S = 60.0


async def poll_until(consumers, condition, what: str, seen: set) -> None:
    """Poll every consumer (records go into ``seen`` as (partition, value)) until ``condition()``."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            for r in await c.poll(timeout_ms=100):
                seen.add((r.partition, r.value))


def settled(consumers, partitions) -> bool:
    generations = {c.group_metadata().generation_id for c in consumers}
    owned = sorted(tp for c in consumers for tp in c.assignment())
    return len(generations) == 1 and min(generations) >= 1 and owned == partitions


@pytest.mark.parametrize(
    ("protocol", "members", "pattern"),
    [("classic", 1, False), ("classic", 2, False), ("classic", 1, True), ("consumer", 1, False)],
    ids=["classic-1", "classic-2", "classic-pattern", "consumer-1"],
)
def test_partitions_added_to_a_subscribed_topic_are_consumed(broker, protocol, members, pattern):
    topic = topic_name(f"grow-{protocol}-{members}-{pattern}")
    group = topic_name(f"g-grow-{protocol}-{members}-{pattern}")
    settings = dict(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        group_protocol=protocol,
        auto_offset_reset="earliest",
        metadata_max_age_ms=300,
    )
    if protocol == "classic":
        settings.update(session_timeout_ms=6000, heartbeat_interval_ms=200)

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
            await client.produce(topic, 0, encode_batch([(None, b"before")]))
        consumers = [AsyncConsumer(**settings) for _ in range(members)]
        for c in consumers:
            if pattern:  # classic: matched against all topics' metadata every metadata.max.age.ms
                c.subscribe(pattern=re.escape(topic))
            else:
                c.subscribe([topic])
        seen: set = set()
        try:
            await poll_until(consumers, lambda: (0, b"before") in seen, "the first record", seen)
            # The group settled: every member in the same generation, the one partition owned once.
            await poll_until(consumers, lambda: settled(consumers, [TP(topic, 0)]), "the group", seen)
            async with AsyncAdminClient(broker.bootstrap) as admin:
                await admin.create_partitions(topic, 3)
            async with AsyncClient(broker.bootstrap) as client:
                for p in (1, 2):
                    await client.produce(topic, p, encode_batch([(None, b"new-%d" % p)]))
            await poll_until(
                consumers,
                lambda: {(1, b"new-1"), (2, b"new-2")} <= seen,
                "the records of the new partitions",
                seen,
            )
            owned = sorted(tp for c in consumers for tp in c.assignment())
            assert owned == [TP(topic, 0), TP(topic, 1), TP(topic, 2)]
        finally:
            for c in consumers:
                await c.close()

    asyncio.run(run())
