"""A cluster node's security settings: the authorizer and SCRAM are accepted, and a node whose
inter-broker listener makes the other brokers ``User:ANONYMOUS`` (no super user) is warned at start."""

from __future__ import annotations

from onceflow.server.config import server_config
from onceflow.server.security import broker_security, inter_broker_warning

CLUSTER = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,CLIENT://127.0.0.1:19094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
}
SECURITY = {"authorizer.class.name": "standard", "sasl.enabled.mechanisms": "SCRAM-SHA-512"}


def test_a_cluster_node_takes_the_authorizer_and_scram():
    config = broker_security(server_config(CLUSTER), SECURITY)
    assert config.authorizer is not None
    client = next(lst for lst in config.listeners if lst.name == "CLIENT")
    assert list(client.sasl.mechanisms) == ["SCRAM-SHA-512"]


def test_an_anonymous_inter_broker_principal_without_super_user_is_warned_about():
    server = server_config(CLUSTER)
    warning = inter_broker_warning(server, broker_security(server, SECURITY))
    assert warning is not None
    assert "User:ANONYMOUS" in warning and "super.users" in warning and "PLAINTEXT" in warning


def test_no_warning_when_anonymous_is_a_super_user_or_without_an_authorizer_or_on_one_node():
    server = server_config(CLUSTER)
    granted = {**SECURITY, "super.users": "User:admin;User:ANONYMOUS"}
    assert inter_broker_warning(server, broker_security(server, granted)) is None
    no_authorizer = {"sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    assert inter_broker_warning(server, broker_security(server, no_authorizer)) is None
    single = server_config({})
    assert (
        inter_broker_warning(single, broker_security(single, {"authorizer.class.name": "standard"})) is None
    )
