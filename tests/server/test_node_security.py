"""A cluster node's security settings, serving and connecting (``server.security.node_security``):
a TLS/SASL controller listener and inter-broker listener are accepted, the identity a node connects
to the others with comes from the listener's own settings (Kafka's JAAS ``username``/``password``,
its truststore and keystore), and combinations that cannot work are refused in one line."""

from __future__ import annotations

import pytest
from tests.helpers.certs import make_pki

from onceflow.server.config import ConfigError, server_config, split_properties
from onceflow.server.security import node_security

VOTERS = "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="node" password="node-secret" user_node="node-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def secured(pki, roles: str = "broker,controller", node_id: int = 1, **extra: str) -> dict[str, str]:
    """A node whose controller and inter-broker listeners are SASL_SSL (PLAIN), beside a plain one."""
    listeners = [f"INTERNAL://127.0.0.1:{node_id}9094", f"PLAINTEXT://127.0.0.1:{node_id}9092"]
    if "controller" in roles:
        listeners.append(f"CONTROLLER://127.0.0.1:{node_id}9093")
    if roles == "controller":
        listeners = listeners[2:]
    settings = {
        "node.id": str(node_id),
        "process.roles": roles,
        "controller.quorum.voters": VOTERS,
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,INTERNAL:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
    }
    if "broker" in roles:
        settings.update(
            {
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.internal.plain.sasl.jaas.config": JAAS,
            }
        )
    settings.update(extra)
    return settings


def security_of(settings: dict[str, str]):
    own, rest = split_properties(settings)
    return node_security(server_config(own), rest)


def test_controller_and_inter_broker_listeners_serve_and_connect_with_sasl_ssl(pki):
    security = security_of(secured(pki))
    listener = security.controller_listener
    assert (listener.name, listener.protocol) == ("CONTROLLER", "SASL_SSL")
    assert listener.ssl_context is not None and listener.sasl.plain_users == {"node": "node-secret"}
    for client in (security.to_controllers, security.to_brokers):
        assert (client.protocol, client.sasl_mechanism) == ("SASL_SSL", "PLAIN")
        assert (client.sasl_username, client.sasl_password) == ("node", "node-secret")
        assert client.ssl_ca_location == str(pki.ca)
        assert client.ssl_certificate_location == str(pki.server_keystore)  # presented for mTLS
    # The broker's own listeners do not include the controller listener.
    assert [lst.name for lst in security.broker.listeners] == ["INTERNAL", "PLAINTEXT"]
    assert not any(k.startswith("listener.name.controller.") for k in security.broker_properties)


def test_a_broker_only_node_connects_to_a_controller_listener_it_does_not_serve(pki):
    security = security_of(secured(pki, roles="broker", node_id=4))
    assert security.controller_listener is None
    assert security.to_controllers.protocol == "SASL_SSL"
    assert security.to_controllers.sasl_username == "node"


def test_security_inter_broker_protocol_names_the_listener_called_after_it(pki):
    settings = secured(pki)
    settings["listeners"] = "SASL_SSL://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093"
    settings["listener.security.protocol.map"] = "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL"
    del settings["inter.broker.listener.name"]
    settings["security.inter.broker.protocol"] = "SASL_SSL"
    settings["listener.name.sasl_ssl.plain.sasl.jaas.config"] = settings.pop(
        "listener.name.internal.plain.sasl.jaas.config"
    )
    security = security_of(settings)
    assert security.to_brokers.protocol == "SASL_SSL" and security.to_brokers.sasl_username == "node"


def test_plaintext_everywhere_connects_in_plain_text(pki):
    settings = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": VOTERS,
        "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "controller.listener.names": "CONTROLLER",
    }
    security = security_of(settings)
    assert security.to_controllers is None and security.to_brokers is None
    assert security.controller_listener.protocol == "PLAINTEXT"


def test_mutual_tls_between_nodes(pki):
    settings = secured(
        pki,
        **{
            "listener.security.protocol.map": "CONTROLLER:SSL,INTERNAL:SSL,PLAINTEXT:PLAINTEXT",
            "ssl.client.auth": "required",
        },
    )
    security = security_of(settings)
    assert security.controller_listener.client_auth == "required"
    assert security.to_controllers.protocol == "SSL" and security.to_controllers.sasl_mechanism is None
    assert security.to_brokers.ssl_certificate_location == str(pki.server_keystore)


@pytest.mark.parametrize(
    ("changes", "removed", "message"),
    [
        ({}, "sasl.mechanism.controller.protocol", "set sasl.mechanism.controller.protocol=PLAIN"),
        ({}, "sasl.mechanism.inter.broker.protocol", "set sasl.mechanism.inter.broker.protocol=PLAIN"),
        (
            {"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            None,
            "nodes authenticate to each other with PLAIN (or mTLS) so far",
        ),
        (
            {"sasl.mechanism.controller.protocol": "GSSAPI"},
            None,
            "sasl.mechanism.controller.protocol=GSSAPI",
        ),
        (
            {
                "listener.name.controller.plain.sasl.jaas.config": (
                    'org.apache.kafka.common.security.plain.PlainLoginModule required user_node="s";'
                )
            },
            None,
            'sends the username="..." password="..." of this line',
        ),
        (
            {"listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512"},
            None,
            "cannot use SCRAM yet",
        ),
        (
            {"listener.name.controller.ssl.truststore.location": "/nonexistent/ca.pem"},
            None,
            "/nonexistent/ca.pem",
        ),
    ],
)
def test_what_cannot_work_is_refused_in_one_line(pki, changes, removed, message):
    settings = secured(pki, **changes)
    if removed is not None:
        del settings[removed]
    with pytest.raises(ConfigError) as refused:
        security_of(settings)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_connecting_node_reads_its_truststore_from_a_file(pki):
    settings = secured(pki)
    del settings["ssl.truststore.location"]
    settings["listener.name.controller.ssl.truststore.certificates"] = pki.ca.read_text()
    with pytest.raises(ConfigError, match="reads ssl.truststore.location"):
        security_of(settings)


def test_a_broker_only_node_needs_its_own_identity_for_the_controller_listener(pki):
    settings = secured(pki, roles="broker", node_id=4)
    del settings["listener.name.controller.plain.sasl.jaas.config"]
    with pytest.raises(
        ConfigError, match="needs this node's own PLAIN identity: set listener.name.controller"
    ):
        security_of(settings)
