"""A node's configuration under Kafka's names: its id and roles, the controller quorum, its listeners.

``node.id``, ``process.roles`` (``broker``, ``controller``, or both: a combined node),
``controller.quorum.voters`` (``1@127.0.0.1:19093,2@...``), ``listeners`` (``NAME://host:port,...``),
``advertised.listeners``, ``controller.listener.names``, ``inter.broker.listener.name`` (or
``security.inter.broker.protocol``, naming the listener called after that protocol) and
``listener.security.protocol.map`` are checked here, with Kafka's rules (``KafkaConfig``), each broken
rule one line naming the setting. Every listener, the controller and inter-broker ones included, may
use any of Kafka's four security protocols (``server.security`` checks what each needs, on both the
serving and the connecting side). Every other key is left to its owner: ``controller.quorum.*`` to the
Raft layer, the broker's settings (``num.partitions``, ``log.retention.ms`` ...) to ``BrokerConfig``.

With no ``process.roles`` the node is the **single-node default**: a combined broker and controller,
the only voter of its own quorum, whose controller listener takes any free loopback port (nobody
else needs to reach it); ``--host``/``--port`` (or ``listeners``) say where clients connect. That is
what plain ``onceflow serve`` has always been.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from onceflow.protocol.errors import InvalidConfig
from onceflow.raft import config as raft_config

ROLE_BROKER = "broker"
ROLE_CONTROLLER = "controller"
PLAINTEXT = "PLAINTEXT"
DEFAULT_CONTROLLER_LISTENER = "CONTROLLER"
# Kafka's default listener.security.protocol.map (each name maps to itself).
_DEFAULT_PROTOCOLS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}
_SECURITY_PROTOCOLS = frozenset(_DEFAULT_PROTOCOLS)
_LISTENER = re.compile(r"^([A-Za-z0-9_-]+)://(\[[^\]]*\]|[^:/\[\]]*):(-?\d+)$")

# Keys this module owns (the rest go to BrokerConfig, or to the quorum: controller.quorum.*).
SERVER_KEYS = frozenset(
    {
        "node.id",
        "cluster.id",
        "process.roles",
        "controller.quorum.voters",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "listener.security.protocol.map",
        "broker.heartbeat.interval.ms",
        "broker.session.timeout.ms",
        "auto.leader.rebalance.enable",
        "leader.imbalance.check.interval.seconds",
        "leader.imbalance.per.broker.percentage",
        "metadata.max.idle.interval.ms",
    }
)
QUORUM_PREFIX = "controller.quorum."


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = PLAINTEXT

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(text: str, key: str) -> tuple[Listener, ...]:
    """``NAME://host:port,...`` as listeners (security protocols filled in later); an empty host
    means every interface, as in Kafka."""
    listeners: list[Listener] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _LISTENER.match(entry)
        if match is None:
            raise ConfigError(f"{key}: {entry!r} is not of the form NAME://host:port")
        name, host, port_text = match.groups()
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: {entry!r} has port {port}, outside 0..65535")
        listeners.append(Listener(name.upper(), host.strip("[]"), port))
    names = [listener.name for listener in listeners]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}: listener name {name} appears more than once")
    ports = [listener.port for listener in listeners if listener.port != 0]
    for port in ports:
        if ports.count(port) > 1 and key == "listeners":
            raise ConfigError(f"{key}: port {port} is used by more than one listener")
    return tuple(listeners)


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` (``1@host:9093,2@host:9094``) as ``{node id: (host, port)}``: the
    quorum's own parser, its one-line errors raised as this module's ConfigError."""
    try:
        return raft_config.parse_voters(text)
    except InvalidConfig as exc:
        raise ConfigError(str(exc)) from None


def _protocol_map(text: str | None) -> dict[str, str]:
    if text is None:
        return dict(_DEFAULT_PROTOCOLS)
    result: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not of the form NAME:PROTOCOL")
        protocol = protocol.strip().upper()
        if protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: {protocol} is not a security protocol "
                f"({', '.join(sorted(_SECURITY_PROTOCOLS))})"
            )
        result[name.strip().upper()] = protocol
    return result


def _int(properties: Mapping[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = properties.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{key} must be at least {minimum}, not {value}")
    return value


def _bool(properties: Mapping[str, str], key: str, default: bool) -> bool:
    raw = properties.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


@dataclass(frozen=True)
class ServerConfig:
    """What one node is: its id, roles, quorum and listeners (Kafka's names), plus the settings of
    the broker lifecycle and the controller that the server passes on."""

    node_id: int
    roles: frozenset[str]
    voters: Mapping[int, tuple[str, int]]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    controller_listener_names: tuple[str, ...]
    inter_broker_listener_name: str | None
    # The single-node default: the only voter, its controller listener on any free port.
    single_node: bool = False
    broker_heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    metadata_max_idle_interval_ms: int = 500
    quorum: Mapping[str, str] = field(default_factory=dict)  # controller.quorum.* as given
    cluster_id: str | None = None  # cluster.id; None: meta.properties' own (single node) or derived
    # listener.security.protocol.map as given (or Kafka's default): a broker-only node learns the
    # controller listener's protocol here, that listener not being one of its own.
    protocols: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_PROTOCOLS))

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.roles

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.roles

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    def broker_listeners(self) -> tuple[Listener, ...]:
        return tuple(lst for lst in self.listeners if lst.name not in self.controller_listener_names)

    def controller_listener(self) -> Listener | None:
        """The listener this node's controller serves on (the first controller listener it has)."""
        for name in self.controller_listener_names:
            for listener in self.listeners:
                if listener.name == name:
                    return listener
        return None

    def controller_protocol(self) -> str:
        """The security protocol nodes reach the controllers with (that of the first controller
        listener; PLAINTEXT when the map leaves it out, as Kafka allows)."""
        own = self.controller_listener()
        if own is not None:
            return own.security_protocol
        return self.protocols.get(self.controller_listener_names[0], PLAINTEXT)

    def inter_broker_listener(self) -> Listener | None:
        for listener in self.listeners:
            if listener.name == self.inter_broker_listener_name:
                return listener
        return None

    def advertised(self, name: str) -> Listener | None:
        for listener in self.advertised_listeners:
            if listener.name == name:
                return listener
        return None


def split_properties(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the keys a ``ServerConfig`` owns, including ``controller.quorum.*``; the rest)."""
    own, rest = {}, {}
    for key, value in properties.items():
        if key in SERVER_KEYS or key.startswith(QUORUM_PREFIX):
            own[key] = value
        else:
            rest[key] = value
    return own, rest


def server_config(
    properties: Mapping[str, str], *, host: str | None = None, port: int | None = None
) -> ServerConfig:
    """Check ``properties`` (Kafka names; the keys of :data:`SERVER_KEYS` and ``controller.quorum.*``)
    and build the node's config. ``host``/``port`` are ``onceflow serve``'s shorthands for a single
    node's client listener. Raises :class:`ConfigError`."""
    roles_text = properties.get("process.roles")
    common = dict(
        broker_heartbeat_interval_ms=_int(properties, "broker.heartbeat.interval.ms", 2000, 1),
        broker_session_timeout_ms=_int(properties, "broker.session.timeout.ms", 9000, 1),
        auto_leader_rebalance_enable=_bool(properties, "auto.leader.rebalance.enable", True),
        leader_imbalance_check_interval_seconds=_int(
            properties, "leader.imbalance.check.interval.seconds", 300, 1
        ),
        leader_imbalance_per_broker_percentage=_int(properties, "leader.imbalance.per.broker.percentage", 10),
        metadata_max_idle_interval_ms=_int(properties, "metadata.max.idle.interval.ms", 500),
        quorum={
            k: v
            for k, v in properties.items()
            if k.startswith(QUORUM_PREFIX) and k != "controller.quorum.voters"
        },
        cluster_id=properties.get("cluster.id") or None,
    )
    protocols = _protocol_map(properties.get("listener.security.protocol.map"))
    common["protocols"] = protocols
    if common["broker_heartbeat_interval_ms"] >= common["broker_session_timeout_ms"]:
        raise ConfigError(
            f"broker.heartbeat.interval.ms ({common['broker_heartbeat_interval_ms']}) must be below "
            f"broker.session.timeout.ms ({common['broker_session_timeout_ms']})"
        )
    if roles_text is None:
        return _single_node(properties, host, port, protocols, common)
    if host is not None or port is not None:
        raise ConfigError("--host/--port are for a single node; with process.roles, give listeners instead")
    roles = frozenset(r.strip().lower() for r in roles_text.split(",") if r.strip())
    unknown = roles - {ROLE_BROKER, ROLE_CONTROLLER}
    if not roles or unknown:
        raise ConfigError(
            f"process.roles must be broker, controller or broker,controller, not {roles_text!r}"
        )
    if "node.id" not in properties:
        raise ConfigError("node.id must be set when process.roles is set")
    node_id = _int(properties, "node.id", -1)
    if "controller.quorum.voters" not in properties:
        raise ConfigError("controller.quorum.voters must be set when process.roles is set")
    voters = parse_voters(properties["controller.quorum.voters"])
    if ROLE_CONTROLLER in roles and node_id not in voters:
        raise ConfigError(
            f"node.id {node_id} has the controller role, so it must be one of the voters in "
            f"controller.quorum.voters ({', '.join(map(str, sorted(voters)))})"
        )
    if roles == {ROLE_BROKER} and node_id in voters:
        raise ConfigError(
            f"node.id {node_id} is a broker only, so it must not be one of the voters in controller.quorum.voters"
        )
    controller_names = tuple(
        n.strip().upper() for n in properties.get("controller.listener.names", "").split(",") if n.strip()
    )
    if not controller_names:
        raise ConfigError("controller.listener.names must name the listener controllers are reached on")
    if "listeners" not in properties:
        raise ConfigError("listeners must be set when process.roles is set (e.g. PLAINTEXT://127.0.0.1:9092)")
    listeners = _with_protocols(
        parse_listeners(properties["listeners"], "listeners"), protocols, controller_names
    )
    names = {lst.name for lst in listeners}
    if ROLE_CONTROLLER in roles:
        if not any(name in names for name in controller_names):
            raise ConfigError(
                f"controller.listener.names ({', '.join(controller_names)}) must name one of the listeners "
                f"({', '.join(sorted(names))}) on a node with the controller role"
            )
        own = next(lst for name in controller_names for lst in listeners if lst.name == name)
        if own.port != 0 and voters[node_id][1] != own.port:
            raise ConfigError(
                f"controller.quorum.voters gives node {node_id} port {voters[node_id][1]}, but its "
                f"controller listener {own} listens on {own.port}"
            )
    else:
        for name in controller_names:
            if name in names:
                raise ConfigError(
                    f"listeners has the controller listener {name}, but this node has no controller role"
                )
    if ROLE_BROKER not in roles:
        extra = sorted(names - set(controller_names))
        if extra:
            raise ConfigError(
                f"listeners has {', '.join(extra)}, but a controller-only node serves only its controller "
                f"listener ({', '.join(controller_names)})"
            )
        return ServerConfig(
            node_id=node_id,
            roles=roles,
            voters=voters,
            listeners=listeners,
            advertised_listeners=(),
            controller_listener_names=controller_names,
            inter_broker_listener_name=None,
            **common,
        )
    broker_listeners = [lst for lst in listeners if lst.name not in controller_names]
    if not broker_listeners:
        raise ConfigError("listeners must have a broker listener (e.g. PLAINTEXT://127.0.0.1:9092)")
    inter_broker = _inter_broker_listener_name(properties)
    if inter_broker in controller_names:
        raise ConfigError(f"inter.broker.listener.name {inter_broker} cannot be a controller listener")
    if inter_broker not in {lst.name for lst in broker_listeners}:
        raise ConfigError(
            f"inter.broker.listener.name {inter_broker} is not one of the broker listeners "
            f"({', '.join(lst.name for lst in broker_listeners)})"
        )
    advertised = _advertised(properties, broker_listeners, protocols, controller_names)
    return ServerConfig(
        node_id=node_id,
        roles=roles,
        voters=voters,
        listeners=listeners,
        advertised_listeners=advertised,
        controller_listener_names=controller_names,
        inter_broker_listener_name=inter_broker,
        **common,
    )


def _with_protocols(
    listeners: tuple[Listener, ...], protocols: Mapping[str, str], controller_names: tuple[str, ...]
) -> tuple[Listener, ...]:
    result = []
    for listener in listeners:
        protocol = protocols.get(listener.name)
        if protocol is None:
            if listener.name not in controller_names:
                raise ConfigError(
                    f"listener {listener.name} has no security protocol: add {listener.name}:PLAINTEXT to "
                    "listener.security.protocol.map"
                )
            protocol = PLAINTEXT  # Kafka lets an unmapped controller listener be PLAINTEXT
        result.append(Listener(listener.name, listener.host, listener.port, protocol))
    return tuple(result)


def _inter_broker_listener_name(properties: Mapping[str, str]) -> str:
    """``inter.broker.listener.name``, or the listener named after ``security.inter.broker.protocol``
    (default PLAINTEXT); Kafka refuses both at once."""
    name = properties.get("inter.broker.listener.name")
    protocol = properties.get("security.inter.broker.protocol")
    if name is not None and protocol is not None:
        raise ConfigError("set only one of inter.broker.listener.name and security.inter.broker.protocol")
    if name is not None:
        return name.strip().upper()
    protocol = (protocol or PLAINTEXT).strip().upper()
    if protocol not in _SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security.inter.broker.protocol: {protocol} is not a security protocol "
            f"({', '.join(sorted(_SECURITY_PROTOCOLS))})"
        )
    return protocol


def _advertised(
    properties: Mapping[str, str],
    broker_listeners: list[Listener],
    protocols: Mapping[str, str],
    controller_names: tuple[str, ...],
) -> tuple[Listener, ...]:
    """``advertised.listeners`` (default: the listeners), one per broker listener; a listener the
    setting leaves out is advertised as it listens."""
    given = {}
    if "advertised.listeners" in properties:
        for listener in parse_listeners(properties["advertised.listeners"], "advertised.listeners"):
            if listener.name in controller_names:
                # As in Kafka (whose sample server.properties advertises CONTROLLER://...): a
                # controller listener there is not a broker's, and is never told to clients.
                # Controllers are reached through controller.quorum.voters.
                continue
            if listener.name not in {lst.name for lst in broker_listeners}:
                raise ConfigError(
                    f"advertised.listeners has {listener.name}, which is not one of the listeners"
                )
            if listener.host in ("", "0.0.0.0", "::"):
                raise ConfigError(f"advertised.listeners: {listener} must name a host clients can reach")
            given[listener.name] = listener
    result = []
    for listener in broker_listeners:
        chosen = given.get(listener.name, listener)
        result.append(Listener(chosen.name, chosen.host, chosen.port, listener.security_protocol))
    return tuple(result)


def _single_node(
    properties: Mapping[str, str],
    host: str | None,
    port: int | None,
    protocols: Mapping[str, str],
    common: dict,
) -> ServerConfig:
    for key in ("controller.quorum.voters", "controller.listener.names"):
        if key in properties:
            raise ConfigError(f"{key} needs process.roles (broker, controller, or broker,controller)")
    node_id = _int(properties, "node.id", 0)
    if "listeners" in properties:
        if host is not None or port is not None:
            raise ConfigError("give either listeners or --host/--port, not both")
        listeners = _with_protocols(parse_listeners(properties["listeners"], "listeners"), protocols, ())
        if not listeners:
            raise ConfigError("listeners names no listener")
        if DEFAULT_CONTROLLER_LISTENER in {lst.name for lst in listeners}:
            raise ConfigError(
                f"listeners: {DEFAULT_CONTROLLER_LISTENER} is a single node's own controller listener; "
                "use another name, or set process.roles for a cluster node"
            )
    else:
        listeners = (Listener(PLAINTEXT, host or "127.0.0.1", 9092 if port is None else port),)
    inter_broker = properties.get("inter.broker.listener.name", listeners[0].name).strip().upper()
    if inter_broker not in {lst.name for lst in listeners}:
        raise ConfigError(f"inter.broker.listener.name {inter_broker} is not one of the listeners")
    advertised = _advertised(properties, list(listeners), protocols, ())
    controller = Listener(DEFAULT_CONTROLLER_LISTENER, "127.0.0.1", 0)
    return ServerConfig(
        node_id=node_id,
        roles=frozenset({ROLE_BROKER, ROLE_CONTROLLER}),
        voters={node_id: ("127.0.0.1", 0)},
        listeners=(*listeners, controller),
        advertised_listeners=advertised,
        controller_listener_names=(DEFAULT_CONTROLLER_LISTENER,),
        inter_broker_listener_name=inter_broker,
        single_node=True,
        **common,
    )
