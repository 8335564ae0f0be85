"""The security of a node: its broker listeners, its controller listener, and the connections it opens
to other nodes, from the listeners (``server.config``) with their protocols and the TLS, SASL and
authorizer settings (``broker.security.config``).

Serving: every listener of the node, the controller listener included, is checked and built by the
broker's own listener code (``security_config``), so a controller listener takes TLS, mTLS and SASL
PLAIN exactly as a client listener does.

Connecting (Kafka's rules): a node reaches the controllers on the first of
``controller.listener.names`` (Raft between voters, a broker's registration, heartbeats and forwarded
admin requests) and the other brokers on the inter-broker listener (replica fetches, transaction
markers, AddPartitionsToTxn), with that listener's protocol, and with the listener's own settings on
the client side too:

- TLS: ``ssl.truststore.location`` is what the other node's certificate must be signed by (the
  system's CAs without it), ``ssl.keystore.location`` the certificate this node presents (mTLS),
  ``ssl.endpoint.identification.algorithm`` (``https`` by default: the certificate must name the
  host of ``controller.quorum.voters`` or of the advertised listener);
- SASL: the mechanism is ``sasl.mechanism.controller.protocol`` / ``sasl.mechanism.inter.broker.protocol``
  (Kafka's default, GSSAPI, needs Kerberos, so it must be set), and the ``username``/``password`` of
  the listener's JAAS line for that mechanism (``listener.name.<l>.<mechanism>.sasl.jaas.config``) are
  what this node sends: Kafka's one entry for both sides, ``user_<name>`` for who may connect,
  ``username``/``password`` for who this node is.

All of it opens through the client's one path (``client.connection.Connection.open`` with a
``ClientSecurity``); :func:`stream_connector` hands the Raft quorum the socket after it.

SCRAM credentials and ACLs are kept in a single node's data dir (``scram-credentials.json``,
``acls.json``) and in a cluster's metadata log, which every broker replays, so a cluster's broker
listeners take SCRAM and the authorizer as a single node's do (``server.cluster_authorization`` says
what the authorizer needs of the brokers' own principal). Nodes do not authenticate to each other
with SCRAM yet, and a controller listener does not take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.broker.security.config import (
    PLAIN,
    ListenerSecurity,
    SecurityConfig,
    listener_setting,
    security_config,
)
from onceflow.broker.security.jaas import PLAIN_LOGIN_MODULE, parse_jaas
from onceflow.server.config import ConfigError, ServerConfig

CONTROLLER_MECHANISM = "sasl.mechanism.controller.protocol"
INTER_BROKER_MECHANISM = "sasl.mechanism.inter.broker.protocol"
_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class NodeSecurity:
    """What :func:`node_security` found: each part None where there is nothing to secure."""

    broker: SecurityConfig | None  # the broker listeners (None on a controller-only node)
    controller_listener: ListenerSecurity | None  # how this node's controller listener serves
    to_controllers: Any  # client.security.ClientSecurity, or None: plain TCP
    to_brokers: Any  # the same, for the inter-broker listener
    broker_properties: Mapping[str, str]  # the settings for the broker's own listeners


def broker_security(server: ServerConfig, properties: Mapping[str, str]) -> SecurityConfig:
    """The broker listeners' security; ConfigError (one line, naming the setting) if it cannot work."""
    security = node_security(server, properties).broker
    assert security is not None, "a node with the broker role"
    return security


def node_security(server: ServerConfig, properties: Mapping[str, str]) -> NodeSecurity:
    """Check every security setting of the node, serving and connecting; ConfigError (one line,
    naming the setting) for anything that cannot work."""
    controller_names = set(server.controller_listener_names)
    own = server.listeners if not server.single_node else server.broker_listeners()
    own_names = {lst.name.lower() for lst in own}
    # A broker-only node may configure the controller listener it connects to (listener.name.controller.*)
    # without serving it: those settings are for its client side only.
    serving = {k: v for k, v in properties.items() if not _for_other_listener(k, controller_names, own_names)}
    try:
        config = security_config(
            serving,
            [(lst.name, lst.host, lst.port) for lst in own],
            {lst.name: lst.security_protocol for lst in own},
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    built = {listener.name: listener for listener in config.listeners}
    broker_listeners = tuple(built[lst.name] for lst in server.broker_listeners() if lst.name in built)
    controller = server.controller_listener()
    controller_security = None
    if controller is not None and not server.single_node:
        controller_security = built[controller.name]
    broker = SecurityConfig(broker_listeners, config.authorizer) if server.is_broker else None
    if controller_security is not None:
        _refuse_scram_on_the_controller_listener(controller_security)
    if server.single_node:
        return NodeSecurity(broker, None, None, None, properties)
    to_controllers = _client_side(
        properties,
        server.controller_listener_names[0],
        server.controller_protocol(),
        CONTROLLER_MECHANISM,
        controller_security,
    )
    to_brokers = None
    inter_broker = server.inter_broker_listener() if server.is_broker else None
    if inter_broker is not None:
        to_brokers = _client_side(
            properties,
            inter_broker.name,
            inter_broker.security_protocol,
            INTER_BROKER_MECHANISM,
            built.get(inter_broker.name),
        )
    # The broker builds its listeners from these: every listener.name.* setting of its own listeners.
    broker_names = {lst.name.lower() for lst in server.broker_listeners()}
    broker_properties = {
        k: v for k, v in properties.items() if not _for_other_listener(k, set(), broker_names)
    }
    return NodeSecurity(broker, controller_security, to_controllers, to_brokers, broker_properties)


def _for_other_listener(key: str, names: set[str], own: set[str]) -> bool:
    """Whether ``key`` is ``listener.name.<l>.*`` for a listener ``l`` outside ``own`` (one of
    ``names``, or any when ``names`` is empty)."""
    if not key.lower().startswith("listener.name."):
        return False
    listener = key[len("listener.name.") :].split(".", 1)[0].lower()
    if listener in own:
        return False
    return not names or listener in {n.lower() for n in names}


def _refuse_scram_on_the_controller_listener(listener: ListenerSecurity) -> None:
    """Broker listeners take SCRAM (the credentials are in the metadata log every broker replays), but
    a controller listener would have to check voters and registering brokers against credentials that
    only that same log brings: refused, as the node-to-node SCRAM of ``_client_side``."""
    scram = [m for m in (listener.sasl.mechanisms if listener.sasl else ()) if m.startswith("SCRAM")]
    if scram:
        raise ConfigError(
            f"controller listener {listener.name} enables {', '.join(scram)}: a cluster node cannot use "
            "SCRAM yet on its controller listener (the credentials are in the metadata log it serves); "
            f"set listener.name.{listener.name.lower()}.sasl.enabled.mechanisms=PLAIN"
        )


def _client_side(
    properties: Mapping[str, str],
    listener: str,
    protocol: str,
    mechanism_key: str,
    serving: ListenerSecurity | None,
) -> Any:
    """The ``ClientSecurity`` this node connects to ``listener`` with (None: PLAINTEXT)."""
    if protocol == "PLAINTEXT":
        return None
    from onceflow.client.security import ClientSecurity
    from onceflow.protocol.errors import KafkaError

    get = listener_setting(properties, listener)
    prefix = f"listener.name.{listener.lower()}."
    values: dict[str, Any] = {"protocol": protocol}
    if protocol in _TLS:
        for text_key, file_key in (
            ("ssl.truststore.certificates", "ssl.truststore.location"),
            ("ssl.keystore.key", "ssl.keystore.location"),
        ):
            if get(text_key) and not get(file_key):
                raise ConfigError(
                    f"listener {listener}: a node connecting to another over TLS reads {file_key} (a PEM "
                    f"file) so far, not {text_key}; set {prefix}{file_key}"
                )
        values["ssl_ca_location"] = get("ssl.truststore.location")
        values["ssl_certificate_location"] = get("ssl.keystore.location")
        values["ssl_key_password"] = get("ssl.key.password") or get("ssl.keystore.password")
        values["ssl_endpoint_identification_algorithm"] = (
            get("ssl.endpoint.identification.algorithm") or "https"
        )
    if protocol in _SASL:
        mechanism = (properties.get(mechanism_key) or "").strip().upper()
        if not mechanism:
            raise ConfigError(
                f"listener {listener} uses {protocol}: set {mechanism_key}=PLAIN (Kafka's default, GSSAPI, "
                "needs Kerberos, which onceflow does not do)"
            )
        if mechanism != PLAIN:
            raise ConfigError(
                f"{mechanism_key}={mechanism}: nodes authenticate to each other with PLAIN (or mTLS) so "
                "far; SCRAM needs the credentials in the cluster's metadata"
            )
        if serving is not None and serving.sasl is not None and mechanism not in serving.sasl.mechanisms:
            raise ConfigError(
                f"{mechanism_key}={mechanism} must be one of listener {listener}'s "
                f"sasl.enabled.mechanisms ({', '.join(serving.sasl.mechanisms)})"
            )
        username, password = _jaas_identity(properties, listener, mechanism)
        values.update(sasl_mechanism=mechanism, sasl_username=username, sasl_password=password)
    try:
        security = ClientSecurity(**values)
        security.ssl_context()  # the files are read now: a wrong one stops the start, named
    except KafkaError as exc:
        raise ConfigError(f"listener {listener}, as this node connects to it: {exc}") from None
    return security


def _jaas_identity(properties: Mapping[str, str], listener: str, mechanism: str) -> tuple[str, str]:
    """``username``/``password`` of the listener's JAAS line for ``mechanism``: who this node is."""
    lowered = {k.lower(): v for k, v in properties.items()}
    keys = (
        f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
        f"listener.name.{listener.lower()}.sasl.jaas.config",
        f"{mechanism.lower()}.sasl.jaas.config",
        "sasl.jaas.config",
    )
    for key in keys:
        text = lowered.get(key)
        if text is None:
            continue
        try:
            entries = parse_jaas(text, key)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for entry in entries:
            if entry.login_module == PLAIN_LOGIN_MODULE:
                username, password = entry.options.get("username"), entry.options.get("password")
                if username and password is not None:
                    return username, password
                raise ConfigError(
                    f"{key}: a node connecting to listener {listener} with {mechanism} sends the "
                    'username="..." password="..." of this line, and it has none (the user_<name> entries '
                    "are who may connect; add this node's own)"
                )
    raise ConfigError(
        f"listener {listener} needs this node's own {mechanism} identity: set {keys[0]} to "
        f'{PLAIN_LOGIN_MODULE} required username="..." password="..." user_<name>="...";'
    )


def stream_connector(security: Any, client_id: str):
    """``connect(host, port)`` for the Raft quorum's connections to other controller listeners: the
    client's connection opened with ``security`` (TLS, versions, SASL), its socket handed over; None
    for plain TCP. An unreachable node raises ConnectionError; a refusal, the client's error."""
    if security is None:
        return None

    async def connect(host: str, port: int):
        from onceflow.client.connection import BrokerConnectionError, Connection

        try:
            connection = await Connection.open(host, port, client_id=client_id, security=security)
        except BrokerConnectionError as exc:
            raise ConnectionError(str(exc)) from None
        return await connection.detach()

    return connect
