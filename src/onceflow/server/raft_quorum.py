"""The metadata quorum of a cluster node: the Raft quorum (``onceflow.raft``) behind the server's
``MetadataQuorum`` contract."""

from __future__ import annotations

from pathlib import Path

from onceflow.server.config import ServerConfig


class QuorumUnavailable(RuntimeError):
    """This build cannot run a multi-node quorum."""


def raft_quorum(server: ServerConfig, data_dir: Path, cluster_id: str):
    try:
        import onceflow.raft.server  # noqa: F401
    except ImportError:
        raise QuorumUnavailable(
            "a cluster node needs the Raft quorum (onceflow.raft), which this build does not have yet; "
            "run a single node (no process.roles) meanwhile"
        ) from None
    raise QuorumUnavailable("the Raft quorum is not wired in yet")
