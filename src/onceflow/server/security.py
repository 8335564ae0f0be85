"""The security of a node's broker: its listeners (``server.config``) with their protocols, the TLS,
SASL and authorizer settings (``broker.security.config``), and what a cluster's authorizer needs.

Every node may use all of it. A cluster keeps its ACLs and users' SCRAM credentials in its metadata
log (AccessControlEntryRecord, UserScramCredentialRecord: the controller writes them, every broker's
image replays them), a single node in its data dir.

Brokers talk to each other too (replica fetches, transaction markers, AddPartitionsToTxn), on the
inter-broker listener, and with an authorizer those requests need CLUSTER_ACTION on the cluster, as
in Kafka. On a PLAINTEXT inter-broker listener (or SSL without client certificates) a broker reaches
the others as ``User:ANONYMOUS``: unless that principal is a super user (or has the ACLs), the other
brokers deny it and replication stops. Kafka starts anyway and denies; so does onceflow, with a
warning at start naming the fix (:func:`inter_broker_warning`) and each denial in the authorizer log.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.broker.security.config import SecurityConfig, security_config
from onceflow.broker.security.principal import ANONYMOUS
from onceflow.server.config import ConfigError, ServerConfig

_ANONYMOUS_PROTOCOLS = ("PLAINTEXT", "SSL")


def broker_security(server: ServerConfig, properties: Mapping[str, str]) -> SecurityConfig:
    """The broker listeners' security; ConfigError (one line, naming the setting) if it cannot work."""
    listeners = server.broker_listeners()
    try:
        return security_config(
            properties,
            [(lst.name, lst.host, lst.port) for lst in listeners],
            {lst.name: lst.security_protocol for lst in listeners},
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def inter_broker_warning(server: ServerConfig, config: SecurityConfig) -> str | None:
    """Why the other brokers of this cluster will be denied here, or None: a cluster node with an
    authorizer whose inter-broker listener makes them ``User:ANONYMOUS``, which is no super user."""
    if server.single_node or config.authorizer is None or server.inter_broker_listener_name is None:
        return None
    listener = next((lst for lst in config.listeners if lst.name == server.inter_broker_listener_name), None)
    if listener is None or listener.protocol not in _ANONYMOUS_PROTOCOLS:
        return None
    if listener.protocol == "SSL" and listener.client_auth != "none":
        return None  # brokers present certificates: their principal comes from them
    if ANONYMOUS in config.authorizer.super_users:
        return None
    return (
        f"the authorizer is on and inter-broker listener {listener.name} is {listener.protocol}, so the "
        f"other brokers reach this one as {ANONYMOUS}, which needs CLUSTER_ACTION on the cluster for "
        f"replica fetches and transaction markers: add {ANONYMOUS} to super.users (and keep that "
        "listener on a private network) or secure the inter-broker listener; until then they are denied"
    )
