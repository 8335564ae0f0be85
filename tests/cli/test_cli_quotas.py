"""``onceflow quotas set|describe`` against a broker process, as kafka-configs.sh --entity-type
clients|users is used; and the serve flags of the overload limits."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from tests.helpers.broker import BrokerProcess

from onceflow.cli.main import cli
from onceflow.cli.serve import broker_config


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("quotas"))
    proc.start()
    yield proc
    proc.stop()


def run(broker, *args: str):
    return CliRunner().invoke(cli, ["quotas", *args, "--bootstrap-server", broker.bootstrap])


def test_set_then_describe_client_and_user_quotas(broker):
    result = run(
        broker,
        "set",
        "--client",
        "app",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert result.exit_code == 0, result.output
    assert "quotas of client-id=app: producer_byte_rate=1048576, consumer_byte_rate=2097152" in result.output
    assert run(broker, "set", "--client-defaults", "--add-config", "request_percentage=50").exit_code == 0
    assert (
        run(
            broker, "set", "--user-defaults", "--client", "app", "--add-config", "producer_byte_rate=512"
        ).exit_code
        == 0
    )
    every = run(broker, "describe")
    assert every.exit_code == 0
    assert "request_percentage=50" in every.output and "<default>" in every.output
    one = run(broker, "describe", "--client", "app")  # exactly that entity, as kafka-configs shows it
    assert "producer_byte_rate=1048576" in one.output and "512" not in one.output
    users = run(broker, "describe", "--entity-type", "users", "--client", "app")
    assert "producer_byte_rate=512" in users.output and "1048576" not in users.output
    removed = run(
        broker, "set", "--client", "app", "--delete-config", "producer_byte_rate,consumer_byte_rate"
    )
    assert removed.exit_code == 0
    assert "no client quotas match" in run(broker, "describe", "--client", "app").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["set", "--client", "app", "--add-config", "producer_byte_rate=1.5"],
            "cannot be a fractional value",
        ),
        (["set", "--client", "app", "--add-config", "bogus=1"], "Invalid configuration key bogus"),
        (
            ["set", "--client", "app", "--add-config", "producer_bytes_rate=1"],
            "unknown quota 'producer_bytes_rate'; did you mean 'producer_byte_rate'?",
        ),
        (
            ["set", "--client", "app", "--delete-config", "consumer_byterate"],
            "did you mean 'consumer_byte_rate'?",
        ),
        (["set", "--client", "app", "--add-config", "producer_byte_rate"], "is not KEY=NUMBER"),
        (["set", "--add-config", "producer_byte_rate=1"], "name the entity"),
        (["set", "--client", "a", "--client-defaults", "--add-config", "x=1"], "not both"),
        (["set", "--client", "app"], "nothing to do"),
    ],
)
def test_bad_quotas_get_one_line(broker, args, message):
    result = run(broker, *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_serve_takes_the_overload_settings_by_kafka_names(tmp_path):
    config = broker_config(
        "127.0.0.1",
        0,
        tmp_path,
        {},
        {
            "queued.max.request.bytes": "-1",
            "max.connections.per.ip": "10",
            "max.connections.per.ip.overrides": "127.0.0.2:20",
            "quota.window.num": "2",
        },
    )
    assert config.queued_max_request_bytes == -1 and config.max_connections_per_ip == 10
    assert config.max_connections_per_ip_overrides == "127.0.0.2:20" and config.quota_window_num == 2
    with pytest.raises(click.BadParameter, match="is not host:count"):
        broker_config("127.0.0.1", 0, tmp_path, {}, {"max.connections.per.ip.overrides": "nonsense"})
    with pytest.raises(click.BadParameter, match="queued.max.request.bytes"):
        broker_config("127.0.0.1", 0, tmp_path, {}, {"queued.max.request.bytes": "1000"})
