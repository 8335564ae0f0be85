"""Kafka-named security settings: JAAS PLAIN users, listeners and protocols, per-listener overrides,
the authorizer's settings, and one-line refusals."""

from __future__ import annotations

import pytest

from onceflow.broker.security.jaas import parse_jaas, plain_users
from onceflow.broker.security.principal import KafkaPrincipal
from onceflow.server.config import ConfigError, server_config, split_properties
from onceflow.server.security import broker_security

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="al\\"ice";'
)


def test_plain_users_from_jaas():
    assert plain_users(PLAIN_JAAS) == {"admin": "admin-secret", "alice": 'al"ice'}
    entries = parse_jaas(PLAIN_JAAS + " org.apache.kafka.common.security.scram.ScramLoginModule required;")
    assert [e.login_module.rsplit(".", 1)[1] for e in entries] == ["PlainLoginModule", "ScramLoginModule"]
    for bad in ("PlainLoginModule", "x.Y bogus a=1;", "x.Y required a=1"):
        with pytest.raises(ValueError):
            parse_jaas(bad)
    with pytest.raises(ValueError, match="PlainLoginModule"):
        plain_users("org.apache.kafka.common.security.scram.ScramLoginModule required;")


def node_security(settings: dict[str, str]):
    """The security of a single node given ``settings`` as ``onceflow serve --config`` would: the
    node's keys to ``server.config``, the rest to ``broker.security.config``."""
    own, rest = split_properties(settings)
    return broker_security(server_config(own), rest)


def test_default_is_one_plaintext_listener_on_host_and_port():
    [listener] = node_security({}).listeners
    assert (listener.name, listener.host, listener.port, listener.protocol) == (
        "PLAINTEXT",
        "127.0.0.1",
        9092,
        "PLAINTEXT",
    )
    config = node_security({})
    assert config.authorizer is None and config.open_listeners() == []


def test_listeners_protocols_and_per_listener_settings():
    config = node_security(
        {
            "listeners": "CLIENT://0.0.0.0:9093,INTERNAL://127.0.0.1:9094",
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
            "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.client.scram-sha-512.connections.max.reauth.ms": "60000",
            "connection.failed.authentication.delay.ms": "250",
            "advertised.listeners": "CLIENT://broker.example:9093",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ops",
        }
    )
    client, internal = config.listeners
    assert client.protocol == "SASL_PLAINTEXT" and internal.protocol == "PLAINTEXT"
    assert client.sasl.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert client.sasl.plain_users["alice"] == 'al"ice'
    assert client.sasl.reauth_ms == {"PLAIN": 0, "SCRAM-SHA-512": 60000}
    assert client.sasl.failed_authentication_delay_ms == 250
    assert config.authorizer.super_users == {KafkaPrincipal("User", "admin"), KafkaPrincipal("User", "ops")}
    assert config.open_listeners() == []  # an authorizer stops anonymous clients


def test_unauthenticated_listener_beyond_loopback_is_open_without_an_authorizer():
    config = node_security(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092,LOCAL://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,LOCAL:PLAINTEXT",
        }
    )
    assert [lst.name for lst in config.open_listeners()] == ["PLAINTEXT"]


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"listeners": "PLAINTEXT:/x"}, "NAME://host:port"),
        ({"listeners": "FOO://127.0.0.1:1"}, "add FOO:PLAINTEXT"),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "GSSAPI"},
            "GSSAPI is not supported",
        ),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "PLAIN"}, "has no users"),
        ({"listeners": "SSL://127.0.0.1:1"}, "needs its certificate"),
        ({"ssl.keystore.type": "JKS", "listeners": "SSL://127.0.0.1:1"}, "PEM only"),
        ({"authorizer.class.name": "com.example.Custom"}, "standard authorizer only"),
        ({"super.users": "User:admin"}, "needs an authorizer"),
        ({"authorizer": "standard", "super.users": "admin"}, "super.users"),
        ({"ssl.bogus": "1"}, "unknown security setting"),
        ({"listener.name.other.ssl.client.auth": "required"}, "not one of the listeners"),
        ({"connection.failed.authentication.delay.ms": "soon"}, "must be an integer"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings, words):
    with pytest.raises(ConfigError, match=words) as caught:
        node_security(settings)
    assert "\n" not in str(caught.value)


CLUSTER_NODE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CLIENT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
}


def test_a_cluster_node_takes_sasl_plain_scram_and_the_authorizer():
    """A cluster keeps SCRAM credentials and ACLs in its metadata log, so a cluster node takes them as
    a single node does (it refused them while they were a single node's files)."""
    plain = {**CLUSTER_NODE, "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": PLAIN_JAAS}
    [_, client] = node_security(plain).listeners
    assert client.sasl.mechanisms == ("PLAIN",)
    both = node_security({**plain, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    assert both.listeners[1].sasl.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert node_security({**plain, "authorizer.class.name": "standard"}).authorizer is not None


def test_tls_listener_needs_a_truststore_for_client_auth(tmp_path):
    from tests.helpers.certs import make_pki

    pki = make_pki(tmp_path)
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.server_keystore)}
    assert node_security(base).listeners[0].ssl_context is not None
    with pytest.raises(ConfigError, match="needs ssl.truststore.location"):
        node_security({**base, "ssl.client.auth": "required"})
    encrypted = {**base, "ssl.keystore.location": str(pki.encrypted_keystore)}
    with pytest.raises(ConfigError, match="ssl.key.password"):
        node_security({**encrypted, "ssl.key.password": "wrong"})
    assert node_security({**encrypted, "ssl.key.password": pki.key_password}).listeners[0].uses_tls
    inline = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.key": pki.server_key.read_text(),
        "ssl.keystore.certificate.chain": pki.server_cert.read_text(),
        "ssl.truststore.certificates": pki.ca.read_text(),
        "ssl.client.auth": "requested",
    }
    assert node_security(inline).listeners[0].client_auth == "requested"


def test_a_broker_open_to_everyone_beyond_loopback_warns_when_it_starts_serving(tmp_path, caplog):
    """``onceflow serve`` bound beyond loopback with no authentication and no authorizer says, once
    per such listener, that anyone who can reach the port can read and write everything. (Checked
    without binding: tests listen on loopback only.)"""
    import asyncio
    import logging

    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.server import Broker

    def warnings_for(listeners, security=None) -> list[str]:
        broker = Broker(BrokerConfig(data_dir=tmp_path, security=security or {}), listeners=listeners)
        broker.bound = {name: (host, 9092 + i) for i, (name, host, _port) in enumerate(listeners)}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="onceflow.broker.server"):
            asyncio.run(broker.serve())
        return [r.getMessage() for r in caplog.records if "anyone who can reach the port" in r.getMessage()]

    [warning] = warnings_for([("PLAINTEXT", "0.0.0.0", 9092), ("LOCAL", "127.0.0.1", 9093)])
    assert warning.startswith("listener PLAINTEXT on 0.0.0.0:9092 has no authentication")
    assert warnings_for([("PLAINTEXT", "127.0.0.1", 9092)]) == []  # today's default: no warning
    assert warnings_for([("PLAINTEXT", "0.0.0.0", 9092)], {"authorizer": "standard"}) == []
