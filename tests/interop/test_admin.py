"""Topic administration through each client's admin API: create, describe, describe configs, delete."""

from __future__ import annotations

import time

import pytest
from tests.helpers.admin import ADMIN_CLIENTS, admin_adapter

pytestmark = pytest.mark.interop


def _eventually(predicate, timeout: float = 15.0) -> bool:
    """Metadata may lag a moment behind Create/DeleteTopics; poll instead of sleeping blindly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_create_describe_delete_topic(broker, client, unique_topic):
    admin = admin_adapter(client, broker.bootstrap)
    try:
        admin.create(unique_topic, partitions=3, configs={"retention.ms": "3600000"})

        assert _eventually(lambda: admin.partitions(unique_topic) == 3)
        assert unique_topic in admin.topic_names()
        configs = admin.configs(unique_topic)
        assert configs["retention.ms"] == "3600000"

        admin.delete(unique_topic)

        assert _eventually(lambda: unique_topic not in admin.topic_names())
    finally:
        admin.close()


@pytest.mark.onceflow_only
@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_describe_configs_reports_kafka_defaults(broker, client, unique_topic):
    admin = admin_adapter(client, broker.bootstrap)
    try:
        admin.create(unique_topic, partitions=1, configs={})
        configs = admin.configs(unique_topic)
    finally:
        admin.close()
    # Kafka's topic-level defaults (LogConfig): seven days, 1 GiB segments, CreateTime.
    assert configs["retention.ms"] == "604800000"
    assert configs["segment.bytes"] == "1073741824"
    assert configs["message.timestamp.type"] == "CreateTime"


@pytest.mark.onceflow_only
@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_create_existing_topic_is_refused(broker, client, unique_topic):
    admin = admin_adapter(client, broker.bootstrap)
    try:
        admin.create(unique_topic, partitions=1, configs={})
        with pytest.raises(Exception, match="(?i)exist|36"):  # TOPIC_ALREADY_EXISTS
            admin.create(unique_topic, partitions=1, configs={})
    finally:
        admin.close()


@pytest.mark.onceflow_only
@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_authorized_operations_through_librdkafka(broker, unique_topic, group_protocol):
    """With no authorizer, a Kafka broker grants every operation a resource type supports, and says
    so when a describe asks (KIP-430). librdkafka decodes the bit fields into AclOperation sets; it
    describes a classic group with DescribeGroups and a KIP-848 one with ConsumerGroupDescribe."""
    from confluent_kafka import Consumer, TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(unique_topic, num_partitions=1, replication_factor=1)])[
        unique_topic
    ].result(30)
    group = f"{unique_topic}-group"
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": group_protocol}
    )
    consumer.subscribe([unique_topic])
    try:
        assert _eventually(lambda: consumer.poll(0.2) is None and bool(consumer.assignment()))

        cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=30).result(30)
        assert set(cluster.authorized_operations) == {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
        topics = admin.describe_topics(
            TopicCollection([unique_topic]), include_authorized_operations=True, request_timeout=30
        )
        assert set(topics[unique_topic].result(30).authorized_operations) == {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
        described = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(
            30
        )
        assert set(described.authorized_operations) == {
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
        }
        # Not asked for: librdkafka reports none.
        plain = admin.describe_consumer_groups([group])[group].result(30)
        assert not plain.authorized_operations
    finally:
        consumer.close()
