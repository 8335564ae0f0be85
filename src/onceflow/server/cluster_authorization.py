"""What a cluster's authorizer needs of the brokers' own principal.

Brokers talk to each other too (replica fetches, transaction markers, AddPartitionsToTxn), on the
inter-broker listener, and with an authorizer those requests need CLUSTER_ACTION on the cluster, as
in Kafka, where the brokers' principal is normally a super user. On a PLAINTEXT inter-broker listener
(or SSL without client certificates) a broker reaches the others as ``User:ANONYMOUS``: unless that
principal is a super user (or has the ACLs), the other brokers deny it and replication stops. Kafka
starts anyway and denies; so does onceflow, with a warning at start naming the fix
(:func:`inter_broker_warning`), each denial in the leader's authorizer log and, once per leader, in
the follower's (``broker.replica.fetcher``).

The controller listener asks the same of the nodes (``server.controller_authorization``), and there
nothing works until it is granted: the quorum must form before any ACL can be written, so the
principal nodes reach the controllers as must be a super user (:func:`controller_warning`).
"""

from __future__ import annotations

from onceflow.broker.security.config import AuthorizerSettings, SecurityConfig
from onceflow.broker.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from onceflow.server.config import ServerConfig

_ANONYMOUS_PROTOCOLS = ("PLAINTEXT", "SSL")


def inter_broker_warning(
    server: ServerConfig, config: SecurityConfig, sasl_username: str | None = None
) -> str | None:
    """Why the other brokers of this cluster will be denied here, or None: a cluster node with an
    authorizer whose inter-broker listener makes them ``User:ANONYMOUS``, or the SASL user this node
    connects as (``sasl_username``, the same JAAS identity on every node), which is no super user."""
    if server.single_node or config.authorizer is None or server.inter_broker_listener_name is None:
        return None
    listener = next((lst for lst in config.listeners if lst.name == server.inter_broker_listener_name), None)
    if listener is None:
        return None
    return _principal_warning(
        config.authorizer,
        f"inter-broker listener {listener.name}",
        listener.protocol,
        listener.client_auth != "none",
        sasl_username,
        "brokers",
        "replica fetches and transaction markers",
    )


def controller_warning(
    server: ServerConfig,
    authorizer: AuthorizerSettings | None,
    sasl_username: str | None = None,
    certificate: bool = False,
) -> str | None:
    """The same for the controller listener (``server.controller_authorization``): the principal nodes
    reach the controllers as (the SASL user of ``sasl.mechanism.controller.protocol``, a certificate's
    subject when ``certificate``, else ``User:ANONYMOUS``) must be a super user, or the quorum never
    forms and no broker registers: no ACL can be written before it does."""
    if server.single_node or authorizer is None:
        return None
    return _principal_warning(
        authorizer,
        f"controller listener {server.controller_listener_names[0]}",
        server.controller_protocol(),
        certificate,
        sasl_username,
        "nodes",
        "the quorum's votes and fetches, broker registrations and heartbeats",
    )


def _principal_warning(
    authorizer: AuthorizerSettings,
    listener: str,
    protocol: str,
    certificate: bool,
    sasl_username: str | None,
    who: str,
    what: str,
) -> str | None:
    if sasl_username is not None:
        principal = KafkaPrincipal(USER_TYPE, sasl_username)
        if principal in authorizer.super_users:
            return None
        return (
            f"the authorizer is on and the {who} reach each other as {principal} ({listener}), which needs "
            f"CLUSTER_ACTION on the cluster for {what}: add {principal} to super.users; until then they "
            "are denied"
        )
    if protocol not in _ANONYMOUS_PROTOCOLS:
        return None
    if protocol == "SSL" and certificate:
        return None  # nodes present certificates: their principal comes from them
    if ANONYMOUS in authorizer.super_users:
        return None
    return (
        f"the authorizer is on and {listener} is {protocol}, so the other {who} reach this one as "
        f"{ANONYMOUS}, which needs CLUSTER_ACTION on the cluster for {what}: add {ANONYMOUS} to "
        "super.users (and keep that listener on a private network) or secure it; until then they are "
        "denied"
    )
