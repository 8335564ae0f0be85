"""A cluster whose nodes reach each other only over SASL_SSL (PLAIN), or over mutual TLS (``mode="mtls"``:
SSL with ``ssl.client.auth=required``, each node presenting its certificate): the controller listener
and an ``INTERNAL`` inter-broker listener, each with its own JAAS identity under SASL; clients keep the
PLAINTEXT listener (``ClusterNodes.bootstrap``). For the tests of secured node-to-node connections and
for ``bench/replication.py --inter-broker sasl_ssl``.

    cluster = ClusterNodes(root, 3, extra=settings)
    secure_internal_listeners(cluster, make_pki(root / "pki"))
    with cluster: ...
"""

from __future__ import annotations

from tests.helpers.broker import LOOPBACK, free_port
from tests.helpers.cluster import ClusterNodes, NodeProcess

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule required"
CONTROLLER_JAAS = (
    f'{PLAIN_MODULE} username="controller" password="controller-secret" user_controller="controller-secret";'
)
INTERNAL_JAAS = f'{PLAIN_MODULE} username="broker" password="broker-secret" user_broker="broker-secret";'


class InternalSecureNode(NodeProcess):
    """A combined node: PLAINTEXT for clients, SASL_SSL (or mTLS) for the controller and inter-broker
    listeners."""

    def __init__(self, *args, pki, mode: str = "sasl_ssl", **kwargs) -> None:
        self.internal_port = free_port()
        self.pki = pki
        self.mode = mode
        super().__init__(*args, **kwargs)

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        settings["listeners"] += f",INTERNAL://{LOOPBACK}:{self.internal_port}"
        if self.mode == "mtls":
            return {
                **settings,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
                "inter.broker.listener.name": "INTERNAL",
                "ssl.keystore.location": str(self.pki.node_keystore),
                "ssl.truststore.location": str(self.pki.ca),
                "ssl.client.auth": "required",
                **self.extra,
            }
        return {
            **settings,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.location": str(self.pki.server_keystore),
            "ssl.truststore.location": str(self.pki.ca),
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
            "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
            "connection.failed.authentication.delay.ms": "0",
            **self.extra,
        }


def secure_internal_listeners(cluster: ClusterNodes, pki, mode: str = "sasl_ssl") -> ClusterNodes:
    """Make every node of a not yet started ``cluster`` an :class:`InternalSecureNode`."""
    cluster.nodes = {
        node_id: InternalSecureNode(
            cluster.root / f"node-{node_id}",
            node_id,
            port,
            cport,
            cluster.voters,
            extra=cluster.extra,
            pki=pki,
            mode=mode,
        )
        for node_id, port, cport in cluster.layout
    }
    return cluster
