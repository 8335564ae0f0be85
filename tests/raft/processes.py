"""Quorum nodes as real processes (``python -m onceflow.raft.demo``) for the process tests: each
in its own process group, stdout (one JSON event per line) to a file read back for assertions.
Every process started here is killed by ``Quorum.stop_all``, however the test ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.broker import LOOPBACK, free_port


class DemoNode:
    def __init__(self, node_id: int, voters: str, data_dir: Path, log_dir: Path, args: list[str]) -> None:
        self.node_id = node_id
        self.voters = voters
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.lives: list[Path] = []  # one stdout file per process life

    def start(self, extra: list[str] = ()) -> None:
        out = self.log_dir / f"node{self.node_id}-{len(self.lives)}.jsonl"
        err = out.with_suffix(".log")
        self.lives.append(out)
        command = [
            sys.executable,
            "-m",
            "onceflow.raft.demo",
            "--node-id",
            str(self.node_id),
            "--voters",
            self.voters,
            "--data-dir",
            str(self.data_dir),
            "--verbose",
            *self.args,
            *extra,
        ]
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            self.proc = subprocess.Popen(
                command, stdout=stdout, stderr=stderr, start_new_session=True, env=os.environ
            )

    def events(self, life: int = -1) -> list[dict]:
        if not self.lives:
            return []
        lines = self.lives[life].read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(30)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def leader(self) -> tuple[int | None, int] | None:
        changes = [e for e in self.events() if e["event"] == "leader"]
        return (changes[-1]["leader"], changes[-1]["epoch"]) if changes else None

    def values(self, life: int = -1) -> list[str]:
        """The values this life's state machine applied, by commits (a loaded snapshot restarts them)."""
        values: list[str] = []
        for event in self.events(life):
            if event["event"] == "snapshot-loaded":
                values = [f"<snapshot of {event['values']}: {event['digest']}>"]
            elif event["event"] == "commit":
                values.extend(event["values"])
        return values


class Quorum:
    def __init__(self, root: Path, size: int = 3, args: list[str] = ()) -> None:
        ports = [free_port() for _ in range(size)]
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(ports))
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.nodes = {
            i + 1: DemoNode(i + 1, voters, root / f"n{i + 1}", root / "logs", list(args)) for i in range(size)
        }

    def start_all(self) -> None:
        for node in self.nodes.values():
            node.start()

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def wait_for(self, what: str, predicate, timeout_s: float = 60.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            time.sleep(0.1)
        logs = {n: node.events()[-5:] for n, node in self.nodes.items()}
        raise AssertionError(f"timed out waiting for {what}; last events: {logs}")

    def agreed_leader(self, among: list[int]) -> int | None:
        """The leader every node in ``among`` reports for the same epoch, if they agree on one."""
        seen = {self.nodes[n].leader() for n in among}
        if len(seen) == 1:
            (leader,) = seen
            if leader is not None and leader[0] is not None:
                return leader[0]
        return None
