"""AdminClient against the onceflow broker (one broker for the module)."""

from __future__ import annotations

import asyncio

import pytest
from tests.conftest import topic_name

from onceflow.client import AdminClient, AsyncConsumer
from onceflow.client.consumer import OffsetAndMetadata
from onceflow.client.consumer import TopicPartition as TP
from onceflow.protocol.errors import ErrorCode, KafkaError


def test_topics_configs_partitions(broker):
    topic = topic_name("admin")
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2, configs={"retention.ms": "3600000"})
        assert topic in admin.list_topics()
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
        assert (group, "consumer") in admin.list_groups()
        # The first member auto-committed its positions (0) on close; the second overwrote partition 0.
        assert admin.list_group_offsets(group) == {
            TP(topic, 0): OffsetAndMetadata(0, "m"),
            TP(topic, 1): OffsetAndMetadata(0, ""),
        }
        admin.delete_group(group)
        assert group not in [g for g, _ in admin.list_groups()]
