"""A node's Kafka-named settings: what is accepted, what each bad input says (one line), and the
properties file format."""

from __future__ import annotations

import pytest

from onceflow.server.config import ROLE_BROKER, ROLE_CONTROLLER, ConfigError, server_config
from onceflow.server.properties import parse_properties

VOTERS = "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"


def combined(node_id: int = 1, **extra: str) -> dict[str, str]:
    port = {1: 1, 2: 2, 3: 3}.get(node_id, node_id)
    return {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "controller.quorum.voters": VOTERS,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}9092,CONTROLLER://127.0.0.1:{port}9093",
        "controller.listener.names": "CONTROLLER",
        **extra,
    }


def test_the_single_node_default_is_a_one_voter_combined_node_on_host_and_port():
    config = server_config({}, host="127.0.0.2", port=9999)
    assert config.single_node and config.roles == {ROLE_BROKER, ROLE_CONTROLLER}
    assert config.node_id == 0 and config.voters == {0: ("127.0.0.1", 0)}
    assert [str(lst) for lst in config.broker_listeners()] == ["PLAINTEXT://127.0.0.2:9999"]
    assert config.controller_listener().port == 0  # no fixed port needed
    assert str(server_config({}).broker_listeners()[0]) == "PLAINTEXT://127.0.0.1:9092"


def test_listeners_take_the_place_of_host_and_port():
    config = server_config({"listeners": "PLAINTEXT://:0", "node.id": "4"})
    assert config.node_id == 4 and config.broker_listeners()[0].host == ""
    with pytest.raises(ConfigError, match="either listeners or --host/--port"):
        server_config({"listeners": "PLAINTEXT://127.0.0.1:1"}, port=2)


def test_a_combined_node():
    config = server_config(combined(2))
    assert config.is_broker and config.is_controller and config.is_voter and not config.single_node
    assert config.voters[3] == ("127.0.0.1", 39093)
    assert config.controller_listener().port == 29093
    assert [lst.name for lst in config.broker_listeners()] == ["PLAINTEXT"]
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert str(config.advertised("PLAINTEXT")) == "PLAINTEXT://127.0.0.1:29092"


def test_advertised_listeners_and_a_protocol_map():
    config = server_config(
        combined(
            1,
            listeners="INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:19094,CONTROLLER://127.0.0.1:19093",
            **{
                "advertised.listeners": "INTERNAL://10.0.0.1:19092,EXTERNAL://example.com:443",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
            },
        )
    )
    assert str(config.advertised("EXTERNAL")) == "EXTERNAL://example.com:443"
    assert config.inter_broker_listener_name == "INTERNAL"


def test_broker_only_and_controller_only_nodes():
    broker = server_config(
        {
            "node.id": "4",
            "process.roles": "broker",
            "controller.quorum.voters": VOTERS,
            "listeners": "PLAINTEXT://127.0.0.1:49092",
            "controller.listener.names": "CONTROLLER",
        }
    )
    assert broker.is_broker and not broker.is_controller and not broker.is_voter
    controller = server_config(
        {
            "node.id": "1",
            "process.roles": "controller",
            "controller.quorum.voters": VOTERS,
            "listeners": "CONTROLLER://127.0.0.1:19093",
            "controller.listener.names": "CONTROLLER",
        }
    )
    assert controller.is_controller and not controller.is_broker and controller.broker_listeners() == ()


def test_a_controller_listener_in_advertised_listeners_is_accepted_and_never_told_to_clients():
    # Kafka's own config/kraft/server.properties advertises CONTROLLER://localhost:9093
    config = server_config(
        combined(1, **{"advertised.listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"})
    )
    assert [str(lst) for lst in config.advertised_listeners] == ["PLAINTEXT://localhost:19092"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"node.id": "7"}, "node.id 7 has the controller role, so it must be one of the voters"),
        ({"process.roles": "broker,zookeeper"}, "process.roles must be broker, controller"),
        ({"process.roles": "broker"}, "must not be one of the voters"),
        (
            {"controller.quorum.voters": "1@127.0.0.1:19093,1@127.0.0.1:29093"},
            "node id 1 appears more than once",
        ),
        ({"controller.quorum.voters": "one@127.0.0.1:19093"}, "needs a numeric node id"),
        ({"controller.quorum.voters": "1-127.0.0.1:19093"}, "is not of the form <node id>@<host>:<port>"),
        (
            {"listeners": "PLAINTEXT//127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"},
            "is not of the form NAME://host:port",
        ),
        ({"listeners": "PLAINTEXT://127.0.0.1:99999,CONTROLLER://127.0.0.1:19093"}, "outside 0..65535"),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:19092,PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093"
            },
            "listener name PLAINTEXT appears more than once",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:19093,CONTROLLER://127.0.0.1:19093"},
            "port 19093 is used by more",
        ),
        ({"listeners": "PLAINTEXT://127.0.0.1:19092"}, "must name one of the listeners"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19099"},
            "gives node 1 port 19093",
        ),
        ({"controller.listener.names": ""}, "controller.listener.names must name"),
        ({"inter.broker.listener.name": "CONTROLLER"}, "cannot be a controller listener"),
        ({"inter.broker.listener.name": "OTHER"}, "is not one of the broker listeners"),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
            "set only one of inter.broker.listener.name and security.inter.broker.protocol",
        ),
        ({"security.inter.broker.protocol": "SASL_SSL"}, "SASL_SSL is not one of the broker listeners"),
        ({"security.inter.broker.protocol": "TLS"}, "TLS is not a security protocol"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "TLS is not a security protocol"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:19092"}, "must name a host clients can reach"),
        ({"node.id": "x"}, "node.id must be an integer"),
        ({"broker.heartbeat.interval.ms": "10000"}, "must be below broker.session.timeout.ms"),
    ],
)
def test_bad_settings_are_one_line_each(changes, message):
    with pytest.raises(ConfigError) as refused:
        server_config(combined(1, **changes))
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_cluster_settings_need_process_roles_and_host_port_need_none():
    with pytest.raises(ConfigError, match="needs process.roles"):
        server_config({"controller.quorum.voters": VOTERS})
    with pytest.raises(ConfigError, match="node.id must be set"):
        server_config({"process.roles": "broker", "controller.quorum.voters": VOTERS})
    with pytest.raises(ConfigError, match="--host/--port are for a single node"):
        server_config(combined(1), port=9092)


def test_properties_format():
    text = "\n".join(
        [
            "# a comment",
            "! another",
            "node.id=1",
            "process.roles = broker,\\",
            "    controller",
            "listeners: PLAINTEXT://127.0.0.1:9092",
            "key\\=with\\:escapes value with spaces",
            "unicode=caf\\u00e9",
            "empty=",
            "",
        ]
    )
    assert parse_properties(text) == {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "key=with:escapes": "value with spaces",
        "unicode": "café",
        "empty": "",
    }
