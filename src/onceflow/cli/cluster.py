"""``onceflow cluster up|status``: a local cluster in the foreground, and what a cluster looks like.

``cluster up --brokers N --data-dir DIR`` starts N combined nodes (broker and controller, ids 1..N,
all voters) as ``onceflow serve`` processes on loopback, each with its data under ``DIR/node-<id>``
and its output in ``DIR/node-<id>.log``; the ports are chosen once and kept in ``DIR/cluster.json``,
so the same cluster comes back on the next ``up``. It prints the bootstrap list, and Ctrl-C stops
every node (controlled shutdown first). A node that dies on its own leaves the others running (so a
failover can be watched), and its restart command is printed.

``cluster down --data-dir DIR`` stops every node of that cluster that runs, whoever started it (a node
restarted by hand after a kill too): SIGTERM, so each shuts down under control, to the pid in its lock.

``cluster status`` shows the brokers (fenced or not), the active controller, how many partition
leaderships each broker holds, and each partition's ISR and its followers' lag (how many offsets
each follower's log end is behind the leader's), with the under-replicated partitions counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from onceflow.cli.common import bootstrap_option, friendly_errors, out

CLUSTER_FILE = "cluster.json"
READY_LINE = "onceflow broker listening on"
START_MARKER = "==== cluster up starts this node:"
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_layout(data_dir: Path, brokers: int) -> list[dict]:
    """Each node's id and ports: read from ``cluster.json``, or chosen now and written there."""
    path = data_dir / CLUSTER_FILE
    if path.exists():
        nodes = json.loads(path.read_text())["nodes"]
        if len(nodes) != brokers:
            raise click.UsageError(
                f"{data_dir} holds a cluster of {len(nodes)} nodes; use --brokers {len(nodes)} or another --data-dir"
            )
        return nodes
    nodes = [{"id": i, "port": _free_port(), "controller_port": _free_port()} for i in range(1, brokers + 1)]
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nodes": nodes}, indent=1))
    return nodes


def node_command(node: dict, nodes: list[dict], data_dir: Path, extra: tuple[str, ...] = ()) -> list[str]:
    voters = ",".join(f"{n['id']}@127.0.0.1:{n['controller_port']}" for n in nodes)
    configs = {
        "node.id": str(node["id"]),
        "process.roles": "broker,controller",
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node['port']},CONTROLLER://127.0.0.1:{node['controller_port']}",
        "controller.listener.names": "CONTROLLER",
    }
    command = [sys.executable, "-m", "onceflow", "serve", "--data-dir", str(data_dir / f"node-{node['id']}")]
    for key, value in configs.items():
        command += ["--config", f"{key}={value}"]
    for item in extra:
        command += ["--config", item]
    return command


@click.group()
def cluster():
    """Run a local cluster, and look at one."""


@cluster.command()
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 9), help="Number of nodes.")
@click.option(
    "--data-dir",
    default="./onceflow-cluster",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Each node's data and log go under it.",
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A setting for every node.")
def up(brokers, data_dir, configs):
    """Start a local cluster of combined nodes in the foreground (Ctrl-C stops them all)."""
    nodes = cluster_layout(data_dir, brokers)
    if brokers < 3:  # the internal topics' replication factors (3) cannot be met: use every broker
        factor = str(brokers)
        configs = (
            f"offsets.topic.replication.factor={factor}",
            f"transaction.state.log.replication.factor={factor}",
            f"transaction.state.log.min.isr={min(brokers, 2)}",
            *configs,
        )
    processes: list[tuple[dict, subprocess.Popen, Path]] = []
    stopping = False

    def stop_all(*_args) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop_all)
    try:
        for node in nodes:
            log_path = data_dir / f"node-{node['id']}.log"
            log_file = open(log_path, "ab")  # noqa: SIM115 - the child writes it; closed when it exits
            # The log is kept across runs: readiness is read after this run's marker only, so that an
            # earlier run's "listening" line never passes for this one's.
            log_file.write(f"{START_MARKER} {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode())
            log_file.flush()
            proc = subprocess.Popen(
                node_command(node, nodes, data_dir, configs),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us only: we stop them in order
            )
            log_file.close()
            processes.append((node, proc, log_path))
        _wait_ready(processes)
        bootstrap = ",".join(f"127.0.0.1:{n['port']}" for n in nodes)
        out.print(f"cluster of {len(nodes)} nodes up; bootstrap servers: {bootstrap}")
        for node, proc, _log in processes:  # the pid to kill -9 when watching a failover
            out.print(f"node {node['id']}: pid {proc.pid}, 127.0.0.1:{node['port']}")
        out.print(f"logs: {data_dir}/node-<id>.log; Ctrl-C stops every node")
        sys.stdout.flush()
        running = list(processes)
        while not stopping and running:
            for entry in list(running):
                node, proc, log_path = entry
                if proc.poll() is not None:
                    # A node that dies (a kill -9 to see a failover) leaves the others running: that
                    # is what a user of a cluster wants to watch. The line says how to bring it back.
                    running.remove(entry)
                    command = shlex.join(node_command(node, nodes, data_dir, configs))
                    out.print(
                        f"node {node['id']} {_exit_status(proc.returncode)} (see {log_path}); "
                        f"the others keep running. To restart it: {command}"
                    )
                    sys.stdout.flush()
            time.sleep(0.2)
        if not running:
            raise click.ClickException("every node has exited")
    except KeyboardInterrupt:
        pass
    finally:
        _stop_all(processes)


def _exit_status(returncode: int) -> str:
    """``exited with 1``, or ``was killed by SIGKILL`` for a node a signal ended (Popen's -9)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with {returncode}"


def _wait_ready(processes) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(processes)
    while waiting:
        for entry in list(waiting):
            node, proc, log_path = entry
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            if READY_LINE in text.rsplit(START_MARKER, 1)[-1]:
                waiting.remove(entry)
            elif proc.poll() is not None:
                tail = "\n".join(text.splitlines()[-5:])
                raise click.ClickException(f"node {node['id']} {_exit_status(proc.returncode)}:\n{tail}")
        if time.monotonic() > deadline:
            ids = ", ".join(str(entry[0]["id"]) for entry in waiting)
            raise click.ClickException(
                f"nodes {ids} not ready within {START_TIMEOUT_S:.0f}s (a quorum needs a majority of voters)"
            )
        time.sleep(0.1)


def _stop_all(processes) -> None:
    for _node, proc, _log in processes:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 40
    for _node, proc, _log in processes:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def running_nodes(data_dir: Path) -> list[tuple[int, int]]:
    """``(node id, pid)`` of each node of the cluster in ``data_dir`` that runs: the pid in its data
    dir's lock, if that process is an ``onceflow serve`` of that very data dir (a pid left in a stale
    lock may since belong to something else)."""
    found = []
    for lock in sorted(data_dir.glob("node-*/.lock")):
        try:
            pid = int(lock.read_text().split()[0])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"serve" in argv and str(lock.parent).encode() in argv:
            found.append((int(lock.parent.name.removeprefix("node-")), pid))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie that its parent has not reaped yet has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@cluster.command()
@click.option(
    "--data-dir",
    default="./onceflow-cluster",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The data dir given to `cluster up`.",
)
def down(data_dir):
    """Stop every running node of the cluster in DATA_DIR (those restarted by hand too)."""
    if not (data_dir / CLUSTER_FILE).exists():
        raise click.ClickException(
            f"{data_dir} holds no cluster (no {CLUSTER_FILE}): give the --data-dir of `cluster up`"
        )
    nodes = running_nodes(data_dir)
    for node_id, pid in nodes:
        out.print(f"stopping node {node_id} (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 40
    while nodes and time.monotonic() < deadline:
        nodes = [(node_id, pid) for node_id, pid in nodes if _running(pid)]
        time.sleep(0.2)
    for node_id, pid in nodes:  # not down under control in time
        out.print(f"node {node_id} (pid {pid}) did not stop within 40s: killed")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    out.print(f"no node of {data_dir} is running")


@cluster.command()
@bootstrap_option
def status(bootstrap):
    """Brokers (fenced or not), the active controller, and partition leaders per broker."""
    import asyncio

    from rich.table import Table

    with friendly_errors(bootstrap):
        brokers, controller_id, leaders, leaderless, partitions = asyncio.run(_status(bootstrap))
    table = Table(title=f"cluster at {bootstrap}")
    for column in ("broker", "endpoint", "rack", "state", "leaderships"):
        table.add_column(column)
    for b in brokers:
        role = " (controller)" if b.broker_id == controller_id else ""
        table.add_row(
            f"{b.broker_id}{role}",
            f"{b.host}:{b.port}",
            b.rack or "",
            "fenced" if b.is_fenced else "alive",
            str(leaders.get(b.broker_id, 0)),
        )
    out.print(table)
    if leaderless:
        out.print(f"{leaderless} partition(s) without a leader")
    if not partitions:
        return
    table = Table(title="partitions (lag: how far each follower's log end is behind the leader's)")
    for column in ("partition", "leader", "isr", "followers' lag", "under-replicated"):
        table.add_column(column)
    under = 0
    for p in partitions:
        under += p["under_replicated"]
        lag = ", ".join(f"{b}: {'?' if lag is None else lag}" for b, lag in p["lag"].items())
        table.add_row(
            p["name"],
            str(p["leader"]),
            ",".join(map(str, p["isr"])),
            lag,
            "yes" if p["under_replicated"] else "",
        )
    out.print(table)
    out.print(f"{under} under-replicated partition(s)")


async def _status(bootstrap: str):
    from kafka.protocol.admin import DescribeClusterRequest
    from kafka.protocol.metadata import MetadataRequest

    from onceflow.client.connection import Connection

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    conn = await Connection.open(host, int(port))
    try:
        described = await conn.send(
            DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
            ),
            version=min(2, conn.broker_versions.get(60, (0, 0))[1]),
        )
        metadata = await conn.send(
            MetadataRequest(topics=None, allow_auto_topic_creation=False),
            version=min(12, conn.broker_versions[3][1]),
        )
    finally:
        await conn.close()
    leaders: dict[int, int] = {}
    leaderless = 0
    for topic in metadata.topics:
        for partition in topic.partitions:
            if partition.leader_id < 0:
                leaderless += 1
            else:
                leaders[partition.leader_id] = leaders.get(partition.leader_id, 0) + 1
    partitions = await _partition_lag(described.brokers, metadata.topics)
    return described.brokers, described.controller_id, leaders, leaderless, partitions


async def _partition_lag(brokers, topics) -> list[dict]:
    """Each partition's ISR and its followers' lag: every replica's log end, asked of its own broker
    (ListOffsets as Kafka's debug consumer, replica id -2, which a follower answers too)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    from onceflow.client.connection import BrokerConnectionError, Connection

    held: dict[int, dict[str, list[int]]] = {}
    for topic in topics:
        for p in topic.partitions:
            for replica in p.replica_nodes:
                held.setdefault(replica, {}).setdefault(topic.name, []).append(p.partition_index)
    ends: dict[tuple[str, int, int], int] = {}
    for broker in brokers:
        wanted = held.get(broker.broker_id)
        if not wanted or broker.is_fenced:
            continue
        request = ListOffsetsRequest(
            replica_id=-2,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=name,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=i, timestamp=-1
                        )
                        for i in indexes
                    ],
                )
                for name, indexes in wanted.items()
            ],
        )
        try:
            conn = await Connection.open(broker.host, broker.port)
        except (OSError, BrokerConnectionError):
            # A broker killed a moment ago is still listed unfenced until its session times out:
            # its replicas' lag is unknown ("?"), and the status of the others is still shown.
            continue
        try:
            answer = await conn.send(request, version=min(4, conn.broker_versions[2][1]))
        finally:
            await conn.close()
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    ends[(t.name, p.partition_index, broker.broker_id)] = p.offset
    result = []
    for topic in sorted(topics, key=lambda t: t.name):
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            leader_end = ends.get((topic.name, p.partition_index, p.leader_id))
            lag = {}
            for replica in p.replica_nodes:
                if replica == p.leader_id:
                    continue
                end = ends.get((topic.name, p.partition_index, replica))
                lag[replica] = None if end is None or leader_end is None else max(leader_end - end, 0)
            result.append(
                {
                    "name": f"{topic.name}-{p.partition_index}",
                    "leader": p.leader_id,
                    "isr": list(p.isr_nodes),
                    "lag": lag,
                    "under_replicated": len(p.isr_nodes) < len(p.replica_nodes),
                }
            )
    return result
