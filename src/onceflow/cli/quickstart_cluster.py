"""The brokers of ``onceflow quickstart --cluster``: three combined nodes (broker and controller) as
child processes on loopback, the same layout as ``onceflow cluster up``. Instead of restarting the
only broker mid-run, the quickstart kills (kill -9) the leader of an input partition and starts it
again: its partitions (replication factor 3, min.insync.replicas 2) carry on at new leaders."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from onceflow.cli.children import die_with_parent
from onceflow.cli.cluster import READY_LINE, cluster_layout, node_command

NODES = 3
START_TIMEOUT_S = 90.0
# Quick failure detection, so the pipeline waits seconds, not Kafka's nine, for a new leader.
SETTINGS = ("broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500")


class ClusterChild:
    """Three nodes; ``bootstrap`` lists them all; ``kill9_and_restart`` kills a partition leader."""

    replication_factor = NODES

    def __init__(self, base: Path, quickstart_failed: type[Exception]) -> None:
        self.data_dir = base / "cluster"
        self.nodes = cluster_layout(self.data_dir, NODES)
        self.bootstrap = ",".join(f"127.0.0.1:{n['port']}" for n in self.nodes)
        self._failed = quickstart_failed
        self._procs: dict[int, subprocess.Popen] = {}
        self.restarts = 0
        self.killed: int | None = None
        self.killed_partition = ("", 0)

    def log_path(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}.log"

    def _start_node(self, node: dict) -> None:
        with self.log_path(node["id"]).open("ab") as log_file:
            log_file.write(b"\n==== start ====\n")
            log_file.flush()
            self._procs[node["id"]] = subprocess.Popen(
                node_command(node, self.nodes, self.data_dir, SETTINGS),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # a quickstart killed from outside leaves no node
            )

    def _wait_ready(self, ids: list[int]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(ids)
        while waiting:
            for node_id in list(waiting):
                text = self.log_path(node_id).read_text(errors="replace").rsplit("==== start", 1)[-1]
                if READY_LINE in text:
                    waiting.remove(node_id)
                elif self._procs[node_id].poll() is not None:
                    raise self._failed(f"node {node_id} exited; see {self.log_path(node_id)}")
            if time.monotonic() > deadline:
                raise self._failed(
                    f"nodes {waiting} not ready within {START_TIMEOUT_S:.0f}s; see {self.data_dir}"
                )
            time.sleep(0.1)

    def start(self) -> None:
        for node in self.nodes:
            self._start_node(node)
        self._wait_ready([n["id"] for n in self.nodes])

    def kill9_and_restart(self, topic: str = "flights", partition: int = 0) -> None:
        """kill -9 the leader of ``topic``-``partition``, then start it again (it rejoins as follower)."""
        from onceflow.client import SimpleClient

        with SimpleClient(self.bootstrap) as client:
            info, _configs = client.describe_topic(topic)
        leader = info.partitions[partition].leader
        proc = self._procs[leader]
        proc.kill()
        proc.wait()
        self.killed, self.killed_partition = leader, (topic, partition)
        time.sleep(1.0)
        self._start_node(next(n for n in self.nodes if n["id"] == leader))
        self._wait_ready([leader])
        self.restarts += 1

    def stop(self) -> None:
        # Killed, not stopped: the last nodes' controlled shutdown would wait for a quorum already gone.
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
