"""How the client reaches a secured broker: TLS and SASL settings under librdkafka's names, and the
SASL exchange on a new connection.

Settings (``ClientSecurity.from_config``), as confluent-kafka users write them:
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism`` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.username``, ``sasl.password``, ``ssl.ca.location`` (PEM CA
certificates to trust; the system's by default), ``ssl.certificate.location`` and
``ssl.key.location`` (the client's own certificate and key, for mTLS), ``ssl.key.password``,
``ssl.endpoint.identification.algorithm`` (``https``, the default: the broker's certificate must
name the host connected to; ``none``). Java clients' forms are read too, so a Kafka tool's
``--command-config`` file works: ``sasl.jaas.config`` with ``username``/``password``, and PEM
``ssl.truststore.location`` / ``ssl.keystore.location``.

The exchange (KIP-152): SaslHandshake v1 names the mechanism, SaslAuthenticate carries the tokens
(PLAIN's one, SCRAM's two rounds through ``scramp``, which also checks the broker's final signature,
so a broker that does not know the password cannot pass). A session lifetime in the last answer
(KIP-368) makes the connection re-authenticate at 85-95% of it, as Kafka's clients do.
"""

from __future__ import annotations

import dataclasses
import random
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import scramp
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from onceflow.protocol.errors import ErrorCode, InvalidConfig, KafkaError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# Every setting this module reads, Kafka/librdkafka name -> field.
SETTINGS = {
    "security.protocol": "protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",  # librdkafka's older name
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "sasl.jaas.config": "sasl_jaas_config",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.truststore.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.keystore.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint_identification_algorithm",
}
# Java settings that say "PEM", accepted and otherwise ignored.
_PEM_TYPES = ("ssl.truststore.type", "ssl.keystore.type")


class AuthenticationFailed(KafkaError):  # noqa: N818 - Kafka's SaslAuthenticationException
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


def is_security_setting(key: str) -> bool:
    return key in SETTINGS or key in _PEM_TYPES


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"

    def __post_init__(self) -> None:
        protocol = self.protocol.strip().upper()
        object.__setattr__(self, "protocol", protocol)
        if protocol not in PROTOCOLS:
            raise InvalidConfig(f"security.protocol={self.protocol!r}: use one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            mechanism = (self.sasl_mechanism or "GSSAPI").strip().upper()
            if mechanism not in MECHANISMS:
                raise InvalidConfig(
                    f"sasl.mechanism={mechanism}: onceflow's client speaks {', '.join(MECHANISMS)}"
                    + (
                        " (set sasl.mechanism; Kafka's default GSSAPI needs Kerberos)"
                        if self.sasl_mechanism is None
                        else ""
                    )
                )
            object.__setattr__(self, "sasl_mechanism", mechanism)
            if not self.sasl_username or self.sasl_password is None:
                raise InvalidConfig(f"security.protocol={protocol} needs sasl.username and sasl.password")
        algorithm = (self.ssl_endpoint_identification_algorithm or "none").strip().lower()
        if algorithm not in ("https", "none", ""):
            raise InvalidConfig(f"ssl.endpoint.identification.algorithm={algorithm!r}: use https or none")
        object.__setattr__(self, "ssl_endpoint_identification_algorithm", algorithm or "none")
        if (
            bool(self.ssl_certificate_location) != bool(self.ssl_key_location)
            and not self._keystore_has_key()
        ):
            raise InvalidConfig(
                "ssl.certificate.location and ssl.key.location go together (the client's certificate and its key)"
            )

    def _keystore_has_key(self) -> bool:
        if not self.ssl_certificate_location or self.ssl_key_location:
            return False
        try:
            with open(self.ssl_certificate_location) as f:
                return "PRIVATE KEY" in f.read()
        except OSError:
            return False

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, settings: Mapping[str, Any]) -> ClientSecurity | None:
        """From Kafka/librdkafka-named settings (other keys are ignored); None if none is given."""
        values: dict[str, Any] = {}
        for key, value in settings.items():
            if key in _PEM_TYPES:
                if str(value).upper() != "PEM":
                    raise InvalidConfig(f"{key}={value}: onceflow's client reads PEM files only")
                continue
            field = SETTINGS.get(key)
            if field is None or value is None:
                continue
            if field == "sasl_jaas_config":
                values.update(_jaas_credentials(str(value)))
            else:
                values[field] = str(value)
        return cls(**values) if values else None

    def as_settings(self) -> dict[str, str]:
        """These settings under librdkafka's names (for a producer or consumer config)."""
        names = {v: k for k, v in reversed(list(SETTINGS.items())) if k not in ("sasl.mechanisms",)}
        names.update(ssl_ca_location="ssl.ca.location", ssl_certificate_location="ssl.certificate.location")
        result = {"security.protocol": self.protocol}
        for field_name in _FIELDS + ("ssl_endpoint_identification_algorithm",):
            value = getattr(self, field_name)
            if value is not None:
                result[names[field_name]] = value
        return result

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ssl_ca_location)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.ssl_endpoint_identification_algorithm == "none":
                context.check_hostname = False
            if self.ssl_certificate_location:
                context.load_cert_chain(
                    self.ssl_certificate_location, self.ssl_key_location, password=self.ssl_key_password
                )
        except FileNotFoundError as exc:
            raise InvalidConfig(f"cannot read {exc.filename}: no such file") from None
        except ssl.SSLError as exc:
            raise InvalidConfig(f"cannot use the TLS settings: {exc.reason or exc}") from None
        return context


# The optional settings (None when not given), in ClientSecurity's field order.
_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(ClientSecurity)
    if f.name not in ("protocol", "ssl_endpoint_identification_algorithm")
)


def with_security_fields(cls: type) -> type:
    """Class decorator, placed under ``@dataclass``: gives a producer or consumer config the fields of
    :class:`ClientSecurity` under the settings' own snake-case names (``security_protocol``,
    ``sasl_mechanism``, ``ssl_ca_location``...), with its defaults, at the end of the class's fields.
    The TLS/SASL settings are so declared once (``ClientSecurity``) and checked once
    (:func:`client_security`), and every client config takes the same ones."""
    annotations = cls.__dict__.get("__annotations__")
    if annotations is None:
        annotations = {}
        cls.__annotations__ = annotations
    for security_field in dataclasses.fields(ClientSecurity):
        name = _config_field_name(security_field.name)
        annotations[name] = security_field.type
        setattr(cls, name, field(default=security_field.default, repr=security_field.repr))
    return cls


def _config_field_name(security_field: str) -> str:
    return "security_protocol" if security_field == "protocol" else security_field


def client_security(config: Any) -> ClientSecurity | None:
    """The ``ClientSecurity`` of a config made with :func:`with_security_fields`, or None when it
    connects in plain text; raises ``InvalidConfig`` for a bad setting."""
    protocol = str(config.security_protocol or "PLAINTEXT")
    values = {name: getattr(config, name) for name in _FIELDS if getattr(config, name) is not None}
    if protocol.strip().upper() == "PLAINTEXT" and not values:
        return None
    return ClientSecurity(
        protocol=protocol,
        ssl_endpoint_identification_algorithm=config.ssl_endpoint_identification_algorithm,
        **values,
    )


def _jaas_credentials(text: str) -> dict[str, str]:
    """``username``/``password`` of a PlainLoginModule or ScramLoginModule ``sasl.jaas.config``."""
    import re

    found = dict(re.findall(r'(username|password)\s*=\s*"((?:\\.|[^"\\])*)"', text))
    if "username" not in found or "password" not in found:
        raise InvalidConfig('sasl.jaas.config must give username="..." and password="..."')
    return {"sasl_username": found["username"], "sasl_password": found["password"]}


async def authenticate(connection: Any, security: ClientSecurity) -> int:
    """Run the SASL exchange on an open connection (after ApiVersions); returns the session lifetime
    in ms the broker gave (0: none). Raises :class:`AuthenticationFailed` (or the handshake's error)."""
    mechanism = security.sasl_mechanism
    assert mechanism is not None  # checked by ClientSecurity
    handshake = await connection.send(SaslHandshakeRequest(mechanism=mechanism), version=1)
    if handshake.error_code != ErrorCode.NONE:
        enabled = ", ".join(handshake.mechanisms or []) or "none"
        raise KafkaError(
            f"the broker at {connection.host}:{connection.port} does not offer SASL mechanism {mechanism} "
            f"(it offers {enabled})",
            ErrorCode(handshake.error_code),
        )
    version = min(connection.version_for(SaslAuthenticateRequest), 2)

    async def exchange(token: bytes) -> Any:
        answer = await connection.send(SaslAuthenticateRequest(auth_bytes=token), version=version)
        if answer.error_code != ErrorCode.NONE:
            raise AuthenticationFailed(
                f"authentication as {security.sasl_username!r} to {connection.host}:{connection.port} failed: "
                f"{answer.error_message or ErrorCode(answer.error_code).name}"
            )
        return answer

    if mechanism == "PLAIN":
        answer = await exchange(f"\x00{security.sasl_username}\x00{security.sasl_password}".encode())
    else:
        client = scramp.ScramClient([mechanism], security.sasl_username, security.sasl_password)
        first = await exchange(client.get_client_first().encode())
        try:
            client.set_server_first(bytes(first.auth_bytes).decode())
            answer = await exchange(client.get_client_final().encode())
            client.set_server_final(bytes(answer.auth_bytes).decode())
        except scramp.ScramException as exc:
            raise AuthenticationFailed(
                f"the broker at {connection.host}:{connection.port} failed the SCRAM exchange: {exc}"
            ) from None
    return getattr(answer, "session_lifetime_ms", 0) or 0


def reauthentication_delay_s(session_lifetime_ms: int) -> float:
    """When to re-authenticate: at a random 85-95% of the session (Kafka's client rule)."""
    return session_lifetime_ms * random.uniform(0.85, 0.95) / 1000.0
