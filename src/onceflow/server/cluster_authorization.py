"""What a cluster's authorizer needs of the brokers' own principal.

Brokers talk to each other too (replica fetches, transaction markers, AddPartitionsToTxn), on the
inter-broker listener, and with an authorizer those requests need CLUSTER_ACTION on the cluster, as
in Kafka, where the brokers' principal is normally a super user. On a PLAINTEXT inter-broker listener
(or SSL without client certificates) a broker reaches the others as ``User:ANONYMOUS``: unless that
principal is a super user (or has the ACLs), the other brokers deny it and replication stops. Kafka
starts anyway and denies; so does onceflow, with a warning at start naming the fix
(:func:`inter_broker_warning`), each denial in the leader's authorizer log and, once per leader, in
the follower's (``broker.replica.fetcher``).
"""

from __future__ import annotations

from onceflow.broker.security.config import SecurityConfig
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
    if sasl_username is not None:
        principal = KafkaPrincipal(USER_TYPE, sasl_username)
        if principal in config.authorizer.super_users:
            return None
        return (
            f"the authorizer is on and the brokers reach each other as {principal} (inter-broker listener "
            f"{listener.name}), which needs CLUSTER_ACTION on the cluster for replica fetches and "
            f"transaction markers: add {principal} to super.users; until then they are denied"
        )
    if listener.protocol not in _ANONYMOUS_PROTOCOLS:
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
