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
