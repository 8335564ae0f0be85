"""AlterConfigs (33) and IncrementalAlterConfigs (44): topic configs changed while the topic is in use,
applied to its logs at once and kept across a restart; driven by confluent-kafka, kafka-python and our
own admin client, plus Kafka's rules for the operations themselves."""

from __future__ import annotations

import uuid

import pytest

from onceflow.broker.config_changes import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    incremental_overrides,
    replaced_overrides,
)
from onceflow.protocol.errors import InvalidConfig, InvalidRequest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

LISTS = frozenset({"cleanup.policy"})
DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000"}


# -- the operations (no broker) ------------------------------------------------------------------------


def test_set_delete_append_subtract():
    current = {"retention.ms": "1000", "segment.bytes": "2000"}
    ops = [
        ("retention.ms", OP_SET, "5000"),
        ("segment.bytes", OP_DELETE, None),
        ("max.message.bytes", OP_SET, "100"),
        ("cleanup.policy", OP_APPEND, "compact,delete"),
    ]
    assert incremental_overrides(current, ops, DEFAULTS, LISTS) == {
        "retention.ms": "5000",
        "max.message.bytes": "100",
        "cleanup.policy": "delete,compact",  # appended to the default, no repeats
    }
    assert current == {"retention.ms": "1000", "segment.bytes": "2000"}  # not changed in place
    after = incremental_overrides(
        {"cleanup.policy": "delete,compact"}, [("cleanup.policy", OP_SUBTRACT, "compact")], DEFAULTS, LISTS
    )
    assert after == {"cleanup.policy": "delete"}


@pytest.mark.parametrize(
    "ops,error",
    [
        ([("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)], InvalidRequest),
        ([("retention.ms", 7, "1")], InvalidRequest),
        ([("retention.ms", OP_SET, None)], InvalidRequest),
        ([("retention.ms", OP_APPEND, "1")], InvalidConfig),
    ],
    ids=["duplicate-name", "unknown-operation", "set-null", "append-to-non-list"],
)
def test_bad_operations_are_refused(ops, error):
    with pytest.raises(error):
        incremental_overrides({}, ops, DEFAULTS, LISTS)


def test_alter_configs_replaces_the_whole_set():
    assert replaced_overrides([("retention.ms", "5"), ("segment.ms", None)]) == {"retention.ms": "5"}
    with pytest.raises(InvalidRequest):
        replaced_overrides([("retention.ms", "5"), ("retention.ms", "6")])


# -- over the wire -------------------------------------------------------------------------------------


def _topic(admin: AdminClient, configs: dict[str, str] | None = None) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})])[name].result(30)
    return name


def _overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry, validate_only: bool = False):
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    return admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def _produce_error(bootstrap: str, topic: str, size: int):
    """The error code confluent-kafka reports for one record of ``size`` bytes (None: written)."""
    outcome = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    return outcome[0].code() if outcome[0] is not None else None


def test_confluent_incremental_alter_applies_at_once_and_survives_a_restart(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic(admin, {"retention.ms": "3600000"})
    assert _produce_error(broker.bootstrap, topic, 20_000) is None
    set_ = AlterConfigOpType.SET
    _incremental(
        admin,
        topic,
        ConfigEntry("max.message.bytes", "10000", incremental_operation=set_),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    )
    assert _overrides(admin, topic) == {"max.message.bytes": "10000"}
    # The live log takes the new limit without a restart.
    assert _produce_error(broker.bootstrap, topic, 20_000) == ck.KafkaError.MSG_SIZE_TOO_LARGE
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _overrides(admin, topic) == {"max.message.bytes": "10000"}
    assert _produce_error(broker.bootstrap, topic, 20_000) == ck.KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce_error(broker.bootstrap, topic, 5_000) is None


def test_confluent_incremental_alter_errors_and_validate_only(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic(admin)
    set_ = AlterConfigOpType.SET
    _incremental(
        admin, topic, ConfigEntry("retention.ms", "1000", incremental_operation=set_), validate_only=True
    )
    assert _overrides(admin, topic) == {}  # validated only
    with pytest.raises(ck.KafkaException) as bad:
        _incremental(admin, topic, ConfigEntry("no.such.config", "1", incremental_operation=set_))
    assert bad.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    with pytest.raises(ck.KafkaException) as bad:
        _incremental(admin, topic, ConfigEntry("retention.ms", "soon", incremental_operation=set_))
    assert bad.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    with pytest.raises(ck.KafkaException) as bad:
        _incremental(admin, "no-such-topic", ConfigEntry("retention.ms", "1", incremental_operation=set_))
    assert bad.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    broker_resource = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[ConfigEntry("log.retention.ms", "1", incremental_operation=set_)],
    )
    with pytest.raises(ck.KafkaException) as bad:
        admin.incremental_alter_configs([broker_resource])[broker_resource].result(30)
    assert bad.value.args[0].code() == ck.KafkaError.INVALID_REQUEST
    assert _overrides(admin, topic) == {}


@pytest.mark.parametrize("incremental", [False, True], ids=["AlterConfigs", "IncrementalAlterConfigs"])
def test_kafka_python_alter_configs(broker, incremental):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic(admin, {"retention.ms": "3600000", "segment.ms": "600000"})
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resource = KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})
        kp.alter_configs([resource], incremental=incremental)
    finally:
        kp.close()
    # Either way segment.ms stays: for AlterConfigs kafka-python sends the other overrides along.
    assert _overrides(admin, topic) == {"retention.ms": "7200000", "segment.ms": "600000"}


def test_alter_configs_on_the_wire_replaces_the_whole_set(broker):
    from kafka.protocol.admin import AlterConfigsRequest as R
    from tests.helpers.wire import WireClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic(admin, {"retention.ms": "3600000", "segment.ms": "600000"})
    resource = R.AlterConfigsResource(
        resource_type=2,
        resource_name=topic,
        configs=[R.AlterConfigsResource.AlterableConfig(name="retention.ms", value="7200000")],
    )
    with WireClient(broker.bootstrap) as client:
        response = client.request(R(resources=[resource], validate_only=False), 2)
    assert [(r.error_code, r.resource_name) for r in response.responses] == [(0, topic)]
    assert _overrides(admin, topic) == {"retention.ms": "7200000"}  # segment.ms back to its default


def test_our_admin_client_sets_and_deletes(broker):
    from onceflow.client.admin import AdminClient as OurAdmin

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic(admin, {"segment.ms": "600000"})
    with OurAdmin(broker.bootstrap) as ours:
        ours.alter_configs(topic, set_={"retention.ms": "1234567"}, delete=["segment.ms"])
        described = ours.describe_configs(topic)
    assert described["retention.ms"] == "1234567"
    assert _overrides(admin, topic) == {"retention.ms": "1234567"}
