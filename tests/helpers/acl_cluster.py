"""A cluster with the authorizer on and a SASL_PLAINTEXT (SCRAM-SHA-512) ``CLIENT`` listener on each
node, the nodes reaching each other on PLAINTEXT as ``User:ANONYMOUS``: ``admin`` and ``ANONYMOUS`` are
super users, as docs/security.md says such a cluster needs. For the tests of ACLs and SCRAM users on a
cluster and for ``bench/acl_propagation.py``; the caller gives ``admin`` a credential in each data dir
before the first start.

    cluster = authorizing_cluster(root, 2, extra={...})
    ...  # the admin credential in each node.data_dir
    with cluster: ...
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.broker import LOOPBACK, free_port
from tests.helpers.cluster import ClusterNodes, NodeProcess


class AuthorizingNode(NodeProcess):
    """A combined node with a SASL_PLAINTEXT ``CLIENT`` listener of its own port."""

    def __init__(self, *args, **kwargs) -> None:
        self.client_port = free_port()
        super().__init__(*args, **kwargs)

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        settings["listeners"] += f",CLIENT://{LOOPBACK}:{self.client_port}"
        return {
            **settings,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "connection.failed.authentication.delay.ms": "0",
            "offsets.topic.replication.factor": "2",
            "transaction.state.log.replication.factor": "2",
            **self.extra,
        }


def authorizing_cluster(root: Path, voters: int = 2, extra: dict[str, str] | None = None) -> ClusterNodes:
    """``voters`` combined :class:`AuthorizingNode` nodes under ``root`` (not started)."""
    cluster = ClusterNodes(root, voters, extra=extra)
    cluster.nodes = {
        node_id: AuthorizingNode(
            cluster.root / f"node-{node_id}", node_id, port, cport, cluster.voters, extra=cluster.extra
        )
        for node_id, port, cport in cluster.layout
    }
    return cluster
