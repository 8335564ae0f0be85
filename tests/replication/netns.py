"""Brokers in network namespaces of their own, joined by a bridge, with links that nftables cuts:
real network partitions for the replication tests.

Layout (all names start with ``of-repl-``, everything is removed at the end, even after a failure):
one namespace per node and a hub namespace holding a bridge; each node's namespace is joined to the
bridge by a veth pair and has the address ``10.213.<lab>.<node id>``; the hub (where the test's
clients run, through :class:`Driver`) has ``.254``. Nothing is added to the host's own namespace
but the veth pairs' creation, which moves both ends away at once.

:meth:`NetworkLab.cut` drops every packet between one node and the others (the hub still reaches
it: a client can still write to a leader that lost its cluster); :meth:`NetworkLab.heal` removes the
rules. Needs root (CAP_NET_ADMIN), ``ip`` and ``nft``; :func:`unavailable` says why not otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.cluster import NodeProcess

PREFIX = "of-repl-"
TABLE = "of_repl_cut"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    probe = f"{PREFIX}probe-{os.getpid()}"
    result = _run("ip", "netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"cannot create a network namespace: {result.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


class NetworkLab:
    def __init__(self, nodes: int = 3) -> None:
        self.lab = os.getpid() % 250 + 1
        self.tag = f"{os.getpid() % 100000}"
        self.hub = f"{PREFIX}{self.tag}-hub"
        self.namespaces = {n: f"{PREFIX}{self.tag}-n{n}" for n in range(1, nodes + 1)}

    def ip(self, node: int | str) -> str:
        return f"10.213.{self.lab}.{254 if node == 'hub' else node}"

    def __enter__(self) -> NetworkLab:
        try:
            self._build()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def _build(self) -> None:
        _run("ip", "netns", "add", self.hub)
        _run("ip", "-n", self.hub, "link", "set", "lo", "up")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "addr", "add", f"{self.ip('hub')}/24", "dev", "br0")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for node, ns in self.namespaces.items():
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # Both ends are created straight inside their namespaces: nothing lands in the host's.
            _run(
                "ip", "link", "add", "eth0", "netns", ns, "type", "veth",
                "peer", "name", f"v{node}", "netns", self.hub,
            )  # fmt: skip
            _run("ip", "-n", ns, "addr", "add", f"{self.ip(node)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", self.hub, "link", "set", f"v{node}", "master", "br0")
            _run("ip", "-n", self.hub, "link", "set", f"v{node}", "up")

    def cut(self, node: int) -> None:
        """Drop everything between ``node`` and the other nodes (both ways); the hub still reaches it."""
        others = ", ".join(self.ip(n) for n in self.namespaces if n != node)
        rules = (
            f"table inet {TABLE} {{\n"
            f"  chain input {{ type filter hook input priority 0; ip saddr {{ {others} }} drop; }}\n"
            f"  chain output {{ type filter hook output priority 0; ip daddr {{ {others} }} drop; }}\n"
            "}\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", self.namespaces[node], "nft", "-f", "-"],
            input=rules,
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def heal(self, node: int) -> None:
        _run(
            "ip", "netns", "exec", self.namespaces[node], "nft", "delete", "table", "inet", TABLE, check=False
        )

    def remove(self) -> None:
        for ns in [*self.namespaces.values(), self.hub]:
            _run("ip", "netns", "del", ns, check=False)


class NamespacedNode(NodeProcess):
    """A combined node (broker and controller) inside a namespace of the lab."""

    def __init__(self, data_dir: Path, node_id: int, lab: NetworkLab, extra: dict[str, str]) -> None:
        self.lab = lab
        self.ns = lab.namespaces[node_id]
        host = lab.ip(node_id)
        voters = ",".join(f"{n}@{lab.ip(n)}:9093" for n in lab.namespaces)
        super().__init__(data_dir, node_id, 9092, 9093, voters, extra=extra)
        self.host = host

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        settings["listeners"] = f"PLAINTEXT://{self.host}:9092,CONTROLLER://{self.host}:9093"
        return settings

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *super().command()]

    @property
    def address(self) -> str:
        return f"{self.host}:9092"


class Driver:
    """A client process in the hub namespace, doing what the test asks (``netns_driver``), one JSON
    request and answer per line."""

    def __init__(self, lab: NetworkLab) -> None:
        script = Path(__file__).with_name("netns_driver.py")
        self._proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.hub, sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ),
        )

    def call(self, op: str, **args: object) -> object:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the driver died during {op}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{op}: {answer['error']}")
        return answer["result"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
