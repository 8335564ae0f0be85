"""Start, kill and restart the nodes of an onceflow cluster as processes, for tests and benchmarks.

:class:`ClusterNodes` lays out ``n`` combined nodes (broker and controller, ids 1..n, all voters) on
free loopback ports, each a :class:`NodeProcess` (``python -m onceflow serve`` with Kafka-named
``--config`` settings) with its own data dir and log, all started through ``tests.helpers.broker``'s
process management so that every process is killed at exit whatever happened. Broker-only nodes
(observers of the quorum) can be added with :meth:`ClusterNodes.add_broker`. The partition
replication work reuses it: ``extra`` settings reach every node.

Typical use (one cluster per test module)::

    with ClusterNodes(tmp_path, 3) as cluster:
        bootstrap = cluster.bootstrap
        cluster.kill9(cluster.active_controller())
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.broker import LOOPBACK, BrokerProcess, BrokerStartError, free_port

READY_TIMEOUT_S = 60.0


class NodeProcess(BrokerProcess):
    """One node: ``onceflow serve`` with a node id, roles, voters and listeners."""

    name = "onceflow-node"

    def __init__(
        self,
        data_dir: Path,
        node_id: int,
        port: int,
        controller_port: int | None,
        voters: str,
        roles: str = "broker,controller",
        extra: dict[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.controller_port = controller_port
        self.roles = roles
        self.voters = voters
        self.extra = dict(extra or {})
        super().__init__(data_dir, port)

    def settings(self) -> dict[str, str]:
        listeners = f"PLAINTEXT://{LOOPBACK}:{self.port}"
        if "controller" in self.roles:
            listeners += f",CONTROLLER://{LOOPBACK}:{self.controller_port}"
        return {
            "node.id": str(self.node_id),
            "process.roles": self.roles,
            "controller.quorum.voters": self.voters,
            "listeners": listeners,
            "controller.listener.names": "CONTROLLER",
            **self.extra,
        }

    def command(self) -> list[str]:
        command = BrokerProcess.command(self)
        # Drop the single-node shorthands (--host/--port): listeners say it all.
        command = [
            part
            for i, part in enumerate(command)
            if part not in ("--host", "--port") and command[i - 1] not in ("--host", "--port")
        ]
        for key, value in self.settings().items():
            command += ["--config", f"{key}={value}"]
        return command

    def _is_ready(self, log_text: str) -> bool:
        return (
            "onceflow broker listening on" in log_text
            if "broker" in self.roles
            else "controller listener on" in log_text
        )


class ClusterNodes:
    def __init__(self, root: Path, voters: int = 3, extra: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.extra = dict(extra or {})
        self.layout = [(node_id, free_port(), free_port()) for node_id in range(1, voters + 1)]
        self.voters = ",".join(f"{node_id}@{LOOPBACK}:{cport}" for node_id, _p, cport in self.layout)
        self.nodes: dict[int, NodeProcess] = {
            node_id: NodeProcess(
                self.root / f"node-{node_id}", node_id, port, cport, self.voters, extra=self.extra
            )
            for node_id, port, cport in self.layout
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{node.port}" for node in self.nodes.values() if "broker" in node.roles)

    def start(self) -> ClusterNodes:
        """Start every node at once (a quorum needs a majority up before any is ready)."""
        for node in self.nodes.values():
            node.start_nowait()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            if node.running:
                node.wait_ready(max(1.0, deadline - time.monotonic()))

    def add_broker(self, node_id: int) -> NodeProcess:
        node = NodeProcess(
            self.root / f"node-{node_id}",
            node_id,
            free_port(),
            None,
            self.voters,
            roles="broker",
            extra=self.extra,
        )
        self.nodes[node_id] = node
        node.start(READY_TIMEOUT_S)
        return node

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM every node at once, as ``onceflow cluster down`` does, then wait for them all
        (SIGKILL for any still running after ``timeout``). One at a time, the last nodes would each
        wait out their controlled shutdown on a quorum the first ones took away. With a node down
        (a test killed it), they are killed instead: the controller grants no controlled shutdown
        before it has fenced the dead broker, broker.session.timeout.ms later (as Kafka's)."""
        running = [node for node in self.nodes.values() if node.running]
        if len(running) < len(self.nodes):
            self.kill_all()
            return
        for node in running:
            node.terminate()
        deadline = time.monotonic() + timeout
        for node in running:
            node.stop(timeout=max(0.1, deadline - time.monotonic()))

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill9()

    def __enter__(self) -> ClusterNodes:
        try:
            return self.start()
        except BaseException:
            self.kill_all()
            raise

    def __exit__(self, *exc_info: object) -> None:
        # Killed, not stopped: even all at once, a node whose controller stops before granting its
        # controlled shutdown waits out broker.session.timeout.ms (teardowns took 6-15 s). A clean
        # stop of a whole cluster is tested where it is the point (tests/cluster/test_cluster_up.py).
        self.kill_all()


async def request(bootstrap: str, body, version: int):
    """One request to the first broker of ``bootstrap`` with our client's connection."""
    from onceflow.client.connection import Connection

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    conn = await Connection.open(host, int(port))
    try:
        return await conn.send(body, version=version)
    finally:
        await conn.close()


def quorum(bootstrap: str):
    """The metadata quorum as DescribeQuorum gives it (the partition entry: leader, voters ...)."""
    import asyncio

    from kafka.protocol.admin import DescribeQuorumRequest

    topic = DescribeQuorumRequest.TopicData
    body = DescribeQuorumRequest(
        topics=[topic(topic_name="__cluster_metadata", partitions=[topic.PartitionData(partition_index=0)])]
    )
    response = asyncio.run(request(bootstrap, body, 1))
    if response.error_code:
        raise RuntimeError(f"DescribeQuorum answered {response.error_code}")
    return response.topics[0].partitions[0]


__all__ = ["ClusterNodes", "NodeProcess", "BrokerStartError", "quorum", "request"]
