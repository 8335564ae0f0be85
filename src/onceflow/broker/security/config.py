"""The broker's security settings under Kafka's names, checked once: listeners and their protocols, TLS,
SASL, the authorizer.

The node's ``listeners`` (``NAME://host:port,...``) with ``listener.security.protocol.map``
(``NAME:PROTOCOL``; by default each of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL maps to itself) say
where the broker accepts connections and how; ``onceflow.server.config`` reads those (and
``advertised.listeners``), this module what each listener's protocol needs. Any setting below may be
given for one listener only as ``listener.name.<listener>.<setting>`` (Kafka's rule), which wins over
the broker-wide one.

SASL: ``sasl.enabled.mechanisms`` from PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default, GSSAPI,
needs Kerberos, which onceflow does not do: without the setting, the SCRAM mechanisms are enabled, and
PLAIN too where PLAIN users are configured). PLAIN users come from the PlainLoginModule entry of
``listener.name.<listener>.plain.sasl.jaas.config``, or of ``plain.sasl.jaas.config`` /
``sasl.jaas.config`` for every listener. ``connections.max.reauth.ms`` (also per mechanism,
``listener.name.<l>.<mechanism>.connections.max.reauth.ms``) and
``connection.failed.authentication.delay.ms`` are Kafka's (KIP-368; default 100 ms).

Authorizer: ``authorizer.class.name`` naming Kafka's StandardAuthorizer (or AclAuthorizer), or
``authorizer=standard``; ``super.users`` (``User:admin;User:ops``) and
``allow.everyone.if.no.acl.found`` (default false).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from onceflow.broker.security.jaas import plain_users
from onceflow.broker.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    PrincipalMapper,
    distinguished_name,
    user,
)
from onceflow.broker.security.ssl_context import server_context

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
PLAIN, SCRAM_SHA_256, SCRAM_SHA_512 = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
STANDARD_AUTHORIZERS = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "standard",
    }
)
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
# sasl.server.max.receive.size: the largest frame a connection may send before it has authenticated.
DEFAULT_SASL_MAX_RECEIVE_SIZE = 524288

# Settings that may be given per listener (listener.name.<l>.<key>) or broker-wide.
_LISTENER_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.principal.mapping.rules",
        "ssl.endpoint.identification.algorithm",
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.server.max.receive.size",
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
    }
)
_PER_MECHANISM_KEYS = ("sasl.jaas.config", "connections.max.reauth.ms")
# Broker-wide settings only.
_BROKER_KEYS = frozenset(
    {
        "security.inter.broker.protocol",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
        "authorizer",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
    }
)
_LISTENER_PREFIX = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.(.+)$")


def is_security_key(key: str) -> bool:
    """Whether ``key`` is one of the settings this module reads (for routing ``--config`` values)."""
    if key in _BROKER_KEYS or key in _LISTENER_KEYS or key.startswith("listener.name."):
        return True
    mechanism, _, rest = key.partition(".")
    return rest in _PER_MECHANISM_KEYS and mechanism.upper().replace("_", "-") in MECHANISMS


@dataclass(frozen=True)
class SaslSettings:
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]  # PLAIN: user -> password
    reauth_ms: Mapping[str, int]  # connections.max.reauth.ms per mechanism (0: none)
    failed_authentication_delay_ms: int
    max_receive_size: int


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener: where it binds, what clients are told, and how connections authenticate."""

    name: str
    host: str
    port: int
    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    client_auth: str = "none"
    principal_mapper: PrincipalMapper = field(default_factory=PrincipalMapper)
    sasl: SaslSettings | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def authenticates(self) -> bool:
        """Whether every connection proves who it is (SASL, or TLS with a required client certificate)."""
        return self.sasl is not None or self.client_auth == "required"

    def certificate_principal(self, peercert: dict | None) -> KafkaPrincipal:
        """An SSL listener's principal: the peer certificate's subject through
        ssl.principal.mapping.rules, or ANONYMOUS without a certificate (ssl.client.auth=requested or
        none). ValueError: no rule applies."""
        if not peercert:
            return ANONYMOUS
        return user(self.principal_mapper.name_for(distinguished_name(peercert)))

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True)
class AuthorizerSettings:
    super_users: frozenset[KafkaPrincipal]
    allow_everyone_if_no_acl_found: bool


@dataclass(frozen=True)
class SecurityConfig:
    listeners: tuple[ListenerSecurity, ...]
    authorizer: AuthorizerSettings | None = None

    @property
    def any_sasl(self) -> bool:
        return any(listener.sasl is not None for listener in self.listeners)

    def open_listeners(self) -> list[ListenerSecurity]:
        """Listeners where anyone who reaches the port may do everything: no authentication, bound beyond
        loopback, and no authorizer that would stop an anonymous client."""
        if self.authorizer is not None and not self.authorizer.allow_everyone_if_no_acl_found:
            return []
        return [lst for lst in self.listeners if not lst.authenticates and not is_loopback(lst.host)]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (every interface) or a name


def security_config(
    properties: Mapping[str, str],
    listeners: Sequence[tuple[str, str, int]] = ((PLAINTEXT, "127.0.0.1", 9092),),
    protocols: Mapping[str, str] | None = None,
) -> SecurityConfig:
    """Check the settings for the node's ``listeners`` (name, host, port; ``server.config`` parsed
    them) with their security ``protocols`` (a name left out is PLAINTEXT) and build the
    configuration; ValueError naming the setting that is wrong."""
    for key in properties:
        if not is_security_key(key):
            raise ValueError(f"unknown security setting {key!r}")
        prefixed = _LISTENER_PREFIX.match(key)
        if prefixed is not None:
            rest = prefixed.group(2)
            mechanism, _, tail = rest.partition(".")
            per_mechanism = tail in _PER_MECHANISM_KEYS and mechanism.upper() in MECHANISMS
            if rest not in _LISTENER_KEYS and not per_mechanism:
                raise ValueError(f"{key}: {rest!r} cannot be set per listener")
        base = prefixed.group(2) if prefixed is not None else key
        if base.rpartition(".")[2] in ("ms", "size") or base.endswith("max.reauth.ms"):
            _int(properties[key], key, 0, 0)
    protocols = protocols or {}
    names_by_prefix = {name.lower() for name, _, _ in listeners}
    for key in properties:
        prefixed = _LISTENER_PREFIX.match(key)
        if prefixed is not None and prefixed.group(1).lower() not in names_by_prefix:
            raise ValueError(f"{key} is for listener {prefixed.group(1)}, which is not one of the listeners")
    built = [
        _listener(properties, name, host, port, protocols.get(name, PLAINTEXT))
        for name, host, port in listeners
    ]
    return SecurityConfig(tuple(built), _authorizer(properties))


def listener_setting(properties: Mapping[str, str], listener: str):
    """``get(key)``: a setting as ``listener`` sees it, its ``listener.name.<listener>.`` form first."""
    return _getter(properties, listener)


def _getter(properties: Mapping[str, str], listener: str):
    prefix = f"listener.name.{listener.lower()}."
    lowered = {k.lower(): v for k, v in properties.items() if k.lower().startswith(prefix)}

    def get(key: str) -> str | None:
        value = lowered.get(prefix + key)
        return value if value is not None else properties.get(key)

    return get


def _listener(
    properties: Mapping[str, str],
    name: str,
    host: str,
    port: int,
    protocol: str,
) -> ListenerSecurity:
    get = _getter(properties, name)
    context, client_auth = None, "none"
    if protocol in (SSL, SASL_SSL):
        context = server_context(get, name)
        client_auth = (get("ssl.client.auth") or "none").strip().lower()
    try:
        mapper = PrincipalMapper(get("ssl.principal.mapping.rules"))
    except ValueError as exc:
        raise ValueError(f"{exc} (listener {name})") from None
    sasl = _sasl(properties, get, name) if protocol in (SASL_PLAINTEXT, SASL_SSL) else None
    return ListenerSecurity(name, host, port, protocol, context, client_auth, mapper, sasl)


def _sasl(properties: Mapping[str, str], get, listener: str) -> SaslSettings:
    users: dict[str, str] | None = None
    for key in (
        f"listener.name.{listener.lower()}.plain.sasl.jaas.config",
        "plain.sasl.jaas.config",
        f"listener.name.{listener.lower()}.sasl.jaas.config",
        "sasl.jaas.config",
    ):
        text = {k.lower(): v for k, v in properties.items()}.get(key)
        if text is not None:
            try:
                users = plain_users(text, key)
            except ValueError:
                if "plain" in key:
                    raise
                continue  # an unprefixed JAAS config for another mechanism
            break
    enabled_text = get("sasl.enabled.mechanisms")
    if enabled_text is None:
        enabled = [SCRAM_SHA_256, SCRAM_SHA_512] + ([PLAIN] if users is not None else [])
    else:
        enabled = [m.strip().upper() for m in enabled_text.split(",") if m.strip()]
        for mechanism in enabled:
            if mechanism not in MECHANISMS:
                raise ValueError(
                    f"sasl.enabled.mechanisms on listener {listener}: {mechanism} is not supported "
                    f"({', '.join(MECHANISMS)}; onceflow has no GSSAPI or OAUTHBEARER)"
                )
        if not enabled:
            raise ValueError(f"sasl.enabled.mechanisms on listener {listener} names no mechanism")
    if PLAIN in enabled and users is None:
        raise ValueError(
            f"listener {listener} enables PLAIN but has no users: set listener.name.{listener.lower()}."
            "plain.sasl.jaas.config to org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";'
        )
    reauth = {}
    for mechanism in enabled:
        per_mechanism = {k.lower(): v for k, v in properties.items()}.get(
            f"listener.name.{listener.lower()}.{mechanism.lower()}.connections.max.reauth.ms"
        )
        reauth[mechanism] = _int(
            per_mechanism if per_mechanism is not None else get("connections.max.reauth.ms"),
            "connections.max.reauth.ms",
            0,
        )
    return SaslSettings(
        mechanisms=tuple(dict.fromkeys(enabled)),
        plain_users=users or {},
        reauth_ms=reauth,
        failed_authentication_delay_ms=_int(
            get("connection.failed.authentication.delay.ms"),
            "connection.failed.authentication.delay.ms",
            DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
        ),
        max_receive_size=_int(
            get("sasl.server.max.receive.size"),
            "sasl.server.max.receive.size",
            DEFAULT_SASL_MAX_RECEIVE_SIZE,
            1,
        ),
    )


def _authorizer(properties: Mapping[str, str]) -> AuthorizerSettings | None:
    chosen = properties.get("authorizer.class.name") or properties.get("authorizer") or ""
    chosen = chosen.strip()
    if not chosen:
        for key in ("super.users", "allow.everyone.if.no.acl.found"):
            if key in properties:
                raise ValueError(
                    f"{key} needs an authorizer: set authorizer.class.name (or authorizer=standard)"
                )
        return None
    if chosen not in STANDARD_AUTHORIZERS:
        raise ValueError(
            f"authorizer.class.name={chosen}: onceflow has Kafka's standard authorizer only "
            "(org.apache.kafka.metadata.authorizer.StandardAuthorizer, or authorizer=standard)"
        )
    super_users = set()
    for entry in (properties.get("super.users") or "").split(";"):
        if entry.strip():
            try:
                super_users.add(KafkaPrincipal.parse(entry.strip()))
            except ValueError as exc:
                raise ValueError(f"super.users: {exc}") from None
    allow_text = (properties.get("allow.everyone.if.no.acl.found") or "false").strip().lower()
    if allow_text not in ("true", "false"):
        raise ValueError(f"allow.everyone.if.no.acl.found must be true or false, not {allow_text!r}")
    return AuthorizerSettings(frozenset(super_users), allow_text == "true")


def _int(raw: str | None, key: str, default: int, minimum: int = 0) -> int:
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{key} must be at least {minimum}, not {value}")
    return value
