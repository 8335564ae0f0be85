"""AdminClient against the onceflow broker (one broker for the module)."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import topic_name

from onceflow.client import AdminClient, AsyncAdminClient, AsyncConsumer, Producer
from onceflow.client.admin import GroupListing
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from onceflow.client.consumer import OffsetAndMetadata
from onceflow.client.consumer import TopicPartition as TP
from onceflow.protocol.errors import ErrorCode, KafkaError, TopicAlreadyExists


def test_topics_configs_partitions(broker):
    topic = topic_name("admin")
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2, configs={"retention.ms": "3600000"})
        assert topic in admin.list_topics()
        # Errors come as their own classes (all KafkaError), so a script can catch the one it expects.
        with pytest.raises(TopicAlreadyExists, match="TOPIC_ALREADY_EXISTS"):
            admin.create_topic(topic, partitions=2)
        assert sorted(admin.describe_topic(topic).partitions) == [0, 1]
        assert admin.describe_configs(topic)["retention.ms"] == "3600000"
        admin.create_partitions(topic, 4)
        assert sorted(admin.describe_topic(topic).partitions) == [0, 1, 2, 3]
        admin.delete_topic(topic)
        assert topic not in admin.list_topics()
        with pytest.raises(KafkaError) as err:
            admin.describe_topic(topic)
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_groups_list_describe_offsets_delete(broker):
    topic = topic_name("admin-g")
    group = topic_name("admin-grp")
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)

        async def member_commits_then_leaves():
            async with AsyncConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
                enable_auto_commit=False,
            ) as consumer:
                while len(consumer.assignment()) < 2:  # joined: polls keep to their timeout
                    await consumer.getmany(timeout_ms=200)
                await consumer.commit({TP(topic, 0): OffsetAndMetadata(0, "m")})
                return consumer.group_metadata().member_id

        # Describe while the member is in the group, from a second task.
        async def scenario():
            async with AsyncConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            ) as consumer:
                while len(consumer.assignment()) < 2:
                    await consumer.getmany(timeout_ms=200)
                return consumer.group_metadata().member_id, await asyncio.to_thread(
                    admin.describe_group, group
                )

        member_id, described = asyncio.run(scenario())
        assert described.state == "Stable" and described.protocol_type == "consumer"
        assert [m.member_id for m in described.members] == [member_id]
        assert sorted(described.members[0].assignment) == [TP(topic, 0), TP(topic, 1)]
        asyncio.run(member_commits_then_leaves())
        assert GroupListing(group, "consumer", "Empty", "classic") in admin.list_groups()
        # The first member auto-committed its positions (0) on close; the second overwrote partition 0.
        assert admin.list_group_offsets(group) == {
            TP(topic, 0): OffsetAndMetadata(0, "m"),
            TP(topic, 1): OffsetAndMetadata(0, ""),
        }
        admin.delete_group(group)
        assert group not in [g.group_id for g in admin.list_groups()]


def test_list_offsets_of_the_log_start_the_log_end_and_a_timestamp(broker):
    topic = topic_name("admin-lo")
    p0, p1 = TP(topic, 0), TP(topic, 1)
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        try:
            for i in range(4):
                producer.send(topic, value=b"v", partition=0, timestamp_ms=1000 * (i + 1))
            producer.flush()
        finally:
            producer.close()
        admin.delete_records({p0: 1})
        assert admin.list_offsets({p0: EARLIEST_TIMESTAMP, p1: EARLIEST_TIMESTAMP}) == {p0: 1, p1: 0}
        assert admin.list_offsets({p0: LATEST_TIMESTAMP, p1: LATEST_TIMESTAMP}) == {p0: 4, p1: 0}
        # specs may differ per partition; a timestamp finds the first record at or after it
        assert admin.list_offsets({p0: 2500, p1: LATEST_TIMESTAMP}) == {p0: 2, p1: 0}
        with pytest.raises(KafkaError) as err:
            admin.list_offsets({TP(topic_name("admin-lo-missing"), 0): LATEST_TIMESTAMP})
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_and_delete_groups_only_while_a_group_has_no_members(broker):
    topic, group, missing = topic_name("admin-alter"), topic_name("admin-alter-g"), topic_name("admin-none")
    p0, p1 = TP(topic, 0), TP(topic, 1)
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
        # a group that does not exist is created by the commit, Empty and with no protocol type
        admin.alter_group_offsets(group, {p0: 5, p1: OffsetAndMetadata(7, "note")})
        assert admin.list_group_offsets(group) == {p0: OffsetAndMetadata(5), p1: OffsetAndMetadata(7, "note")}
        assert GroupListing(group, "", "Empty", "classic") in admin.list_groups()
        admin.alter_group_offsets(group, {p0: 2})  # the other partition keeps its offset
        assert admin.list_group_offsets(group) == {p0: OffsetAndMetadata(2), p1: OffsetAndMetadata(7, "note")}

    async def while_a_member_is_in():
        async with (
            AsyncConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                group_protocol="consumer",
                enable_auto_commit=False,
            ) as consumer,
            AsyncAdminClient(broker.bootstrap) as admin,
        ):
            await consumer.getmany(timeout_ms=200)  # joined
            with pytest.raises(KafkaError) as refused:
                await admin.alter_group_offsets(group, {p0: 0})
            return refused.value.code, await admin.delete_groups([group, missing, group])

    refused, deleted = asyncio.run(while_a_member_is_in())
    assert refused == ErrorCode.UNKNOWN_MEMBER_ID
    # one answer per group, in the order asked, each group asked once
    assert list(deleted.items()) == [
        (group, ErrorCode.NON_EMPTY_GROUP),
        (missing, ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    with AdminClient(broker.bootstrap) as admin:
        assert admin.list_group_offsets(group) == {p0: OffsetAndMetadata(2), p1: OffsetAndMetadata(7, "note")}
        assert admin.delete_groups([group]) == {group: ErrorCode.NONE}
        assert admin.list_group_offsets(group) == {}
        with pytest.raises(KafkaError) as err:
            admin.delete_group(group)
        assert err.value.code == ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("max_version", [7, 9], ids=["OffsetFetch-v7", "OffsetFetch-v9-groups"])
def test_list_group_offsets_require_stable_leaves_out_a_commit_pending_in_a_transaction(
    broker, monkeypatch, max_version
):
    monkeypatch.setattr("onceflow.client.admin._OFFSET_FETCH_MAX_VERSION", max_version)
    topic, group = topic_name("admin-stable"), topic_name("admin-stable-g")
    p0, p1 = TP(topic, 0), TP(topic, 1)
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
        admin.alter_group_offsets(group, {p0: 1, p1: 1})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"admin-{group}"})
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send_offsets_to_transaction({(topic, 0): 3}, group)
            assert admin.list_group_offsets(group) == {p0: OffsetAndMetadata(1), p1: OffsetAndMetadata(1)}
            assert admin.list_group_offsets(group, require_stable=True) == {p1: OffsetAndMetadata(1)}
            producer.commit_transaction()
        finally:
            producer.close()
        assert admin.list_group_offsets(group, [p0], require_stable=True) == {p0: OffsetAndMetadata(3)}


def test_transactions_and_producers(broker):
    """ListTransactions' filters, DescribeTransactions, DescribeProducers for many partitions at once
    (a failed partition maps to its error), and the abort of a transaction on one partition."""
    topic = topic_name("admin-txn")
    tid = topic_name("admin-tid")
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
        producer = Producer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"open", partition=1).get(30)
            pid, epoch = producer.producer_id_and_epoch

            listed = admin.list_transactions(["Ongoing"], producer_ids=[pid])
            assert [(t.transactional_id, t.state) for t in listed] == [(tid, "Ongoing")]
            assert [t.transactional_id for t in admin.list_transactions(pattern=f"{tid}|nothing")] == [tid]
            assert admin.list_transactions(pattern=tid[:-1]) == []  # whole ids only
            with pytest.raises(KafkaError) as err:
                admin.list_transactions(pattern="(?=x)")
            assert err.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION

            described = admin.describe_transaction(tid)
            assert (described.state, described.producer_id) == ("Ongoing", pid)
            assert described.partitions == [TP(topic, 1)]

            producers = admin.describe_producers_of([TP(topic, 0), TP(topic, 1)])
            assert producers[TP(topic, 0)] == []
            [state] = producers[TP(topic, 1)]
            assert (state.producer_id, state.current_transaction_start_offset) == (pid, 0)
            with pytest.raises(KafkaError) as err:
                admin.describe_producers(TP(topic, 5))
            assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert "no partition 5" in str(err.value)

            # An operator's abort of the open transaction on partition 1: the partition closes it.
            admin.abort_transaction(TP(topic, 1), pid, epoch, 0)
            [state] = admin.describe_producers(TP(topic, 1))
            assert state.current_transaction_start_offset == -1
        finally:
            producer.close()


def test_describe_cluster_log_dirs_and_the_last_stable_offset(broker):
    topic = topic_name("admin-cluster")
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=1)
        cluster = admin.describe_cluster()
        assert [b.port for b in cluster.brokers] == [broker.port]
        assert cluster.controller_id == cluster.brokers[0].node_id and not cluster.from_metadata
        with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic}) as txn:
            txn.init_transactions()
            txn.begin_transaction()
            txn.send(topic, b"x" * 500)
            txn.flush()  # written, transaction open: the LSO stays at its first offset
            tp = TP(topic, 0)
            assert admin.list_offsets({tp: LATEST_TIMESTAMP}) == {tp: 1}
            assert admin.list_offsets({tp: LATEST_TIMESTAMP}, isolation_level=1) == {tp: 0}
            txn.abort_transaction()
        sizes = admin.describe_log_dirs()
        assert list(sizes) == [cluster.brokers[0].node_id]
        assert sizes[cluster.brokers[0].node_id][tp] > 500
