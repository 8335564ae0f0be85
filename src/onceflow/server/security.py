"""The security of a node's broker: its listeners (``server.config``) with their protocols, the TLS,
SASL and authorizer settings (``broker.security.config``), and what a cluster cannot do yet.

TLS, mutual TLS and SASL PLAIN need nothing beyond each broker's own settings, so every node may use
them. SCRAM credentials and ACLs are kept in a single node's data dir (``scram-credentials.json``,
``acls.json``); a cluster would need them in its metadata log (Kafka's UserScramCredentialRecord and
AccessControlEntryRecord, which ``metadata.records`` can already encode), and the controller does not
write those yet. So a cluster node refuses SCRAM and the authorizer at start, rather than let each
broker enforce a different set.
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
    if server.single_node:
        return config
    if config.authorizer is not None:
        raise ConfigError(
            "authorizer.class.name: ACLs are kept by a single node only so far (not in a cluster's "
            "metadata), so a cluster node (process.roles) cannot use the authorizer yet"
        )
    for listener in config.listeners:
        scram = [m for m in (listener.sasl.mechanisms if listener.sasl else ()) if m.startswith("SCRAM")]
        if scram:
            raise ConfigError(
                f"listener {listener.name} enables {', '.join(scram)}: SCRAM credentials are kept by a "
                "single node only so far, so a cluster node (process.roles) cannot use SCRAM yet; set "
                f"listener.name.{listener.name.lower()}.sasl.enabled.mechanisms=PLAIN"
            )
    return config
