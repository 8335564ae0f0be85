"""The security of a node's broker: its listeners (``server.config``) with their protocols, the TLS,
SASL and authorizer settings (``broker.security.config``).

Every node may use all of them: a cluster keeps its ACLs and users' SCRAM credentials in its metadata
log (``server.cluster_authorization`` says what its authorizer needs of the brokers' own principal),
a single node in its data dir.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.broker.security.config import SecurityConfig, security_config
from onceflow.server.config import ConfigError, ServerConfig


def broker_security(server: ServerConfig, properties: Mapping[str, str]) -> SecurityConfig:
    """The broker listeners' security; ConfigError (one line, naming the setting) if it cannot work."""
    listeners = server.broker_listeners()
    try:
        config = security_config(
            properties,
            [(lst.name, lst.host, lst.port) for lst in listeners],
            {lst.name: lst.security_protocol for lst in listeners},
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config
