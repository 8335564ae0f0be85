"""``onceflow groups`` against a broker holding one real (confluent-kafka) consumer group."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from confluent_kafka import OFFSET_INVALID, Consumer, Producer
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.interop.test_groups import committed, create_topic

from onceflow.cli.main import cli

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("groups-cli"), extra_args=["--config", "group.initial.rebalance.delay.ms=0"]
    )
    proc.start()
    yield proc
    proc.stop()


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_list_describe_reset_delete(cli_broker):
    bootstrap = cli_broker.bootstrap
    topic, group = topic_name("cli"), topic_name("g")
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(60):
        p.produce(topic, value=b"v", partition=i % 6)
    assert p.flush(30) == 0
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    seen = 0
    while seen < 30:
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen += 1
    c.commit(asynchronous=False)
    try:
        listing = run("groups", "list", "--bootstrap-server", bootstrap)
        assert group in listing and "Stable" in listing
        described = run("groups", "describe", group, "--bootstrap-server", bootstrap)
        assert "Stable" in described and "rdkafka" in described
        assert "log end" in described and "lag" in described
        # a live group cannot be reset or deleted
        result = CliRunner().invoke(
            cli,
            [
                "groups",
                "reset-offsets",
                group,
                "--topic",
                topic,
                "--to-earliest",
                "--execute",
                "--bootstrap-server",
                bootstrap,
            ],
        )
        assert result.exit_code != 0 and "stop its consumers" in result.output
    finally:
        c.close()
    plan = run(
        "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--bootstrap-server", bootstrap
    )
    assert "plan" in plan
    assert committed(bootstrap, group, topic) != dict.fromkeys(range(6), 0)  # dry run changed nothing
    run(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-earliest",
        "--execute",
        "--bootstrap-server",
        bootstrap,
    )
    assert committed(bootstrap, group, topic) == dict.fromkeys(range(6), 0)
    run(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--shift-by",
        "3",
        "--execute",
        "--bootstrap-server",
        bootstrap,
    )
    assert committed(bootstrap, group, topic) == dict.fromkeys(range(6), 3)
    assert "deleted group" in run("groups", "delete", group, "--bootstrap-server", bootstrap)
    assert group not in run("groups", "list", "--bootstrap-server", bootstrap)
    assert committed(bootstrap, group, topic) == dict.fromkeys(range(6), OFFSET_INVALID)
