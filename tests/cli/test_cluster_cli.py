"""``onceflow serve`` with Kafka's cluster settings (bad ones are one line each), and the cluster
commands against a single node: ``metadata-quorum describe``, ``cluster status``, ``topics create
--replication-factor``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from onceflow.cli.main import cli


def onceflow(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "onceflow", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (["process.roles=broker"], "node.id must be set when process.roles is"),
        (
            ["process.roles=controller", "node.id=4", "controller.quorum.voters=1@127.0.0.1:19093"],
            "must be one of the voters in controller.quorum.voters",
        ),
        (
            [
                "process.roles=broker",
                "node.id=1",
                "controller.quorum.voters=1@127.0.0.1:19093,1@127.0.0.1:29093",
            ],
            "node id 1 appears more than once",
        ),
        (["listeners=PLAINTEXT:/127.0.0.1:9092"], "is not of the form NAME://host:port"),
        (["controller.quorum.voters=1@127.0.0.1:19093"], "needs process.roles"),
    ],
)
def test_bad_cluster_settings_are_one_line_and_exit_2(tmp_path, configs, message):
    args = ["serve", "--data-dir", str(tmp_path)]
    for item in configs:
        args += ["--config", item]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "meta.properties").exists()  # nothing half-made


def test_a_config_file_in_kafkas_format_is_read_and_config_wins(tmp_path):
    properties = tmp_path / "server.properties"
    properties.write_text(
        "# a node\nprocess.roles=broker,controller\nnode.id=9\ncontroller.quorum.voters=1@127.0.0.1:19093\n"
    )
    result = CliRunner().invoke(
        cli, ["serve", "--data-dir", str(tmp_path / "d"), "--config-file", str(properties)]
    )
    assert result.exit_code == 2 and "node.id 9 has the controller role" in result.output
    missing = CliRunner().invoke(cli, ["serve", "--config-file", str(tmp_path / "nope.properties")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_metadata_quorum_describe_of_a_single_node(broker):
    status = onceflow("metadata-quorum", "describe", "--status", "--bootstrap-server", broker.bootstrap)
    assert status.returncode == 0, status.stderr
    lines = dict(line.split(":", 1) for line in status.stdout.splitlines() if ":" in line)
    assert lines["LeaderId"].strip() == "0" and lines["CurrentVoters"].strip() == "[0]"
    assert int(lines["HighWatermark"]) > 0
    replication = onceflow(
        "metadata-quorum", "describe", "--replication", "--bootstrap-server", broker.bootstrap
    )
    assert replication.returncode == 0 and "Leader" in replication.stdout
    neither = onceflow("metadata-quorum", "describe", "--bootstrap-server", broker.bootstrap)
    assert neither.returncode == 2 and "choose --status or --replication" in neither.stderr


def test_cluster_status_and_replication_factor_of_a_single_node(broker, make_topic):
    status = onceflow("cluster", "status", "--bootstrap-server", broker.bootstrap)
    assert status.returncode == 0, status.stderr
    assert "0 (controller)" in status.stdout and "alive" in status.stdout
    name = make_topic("rf")
    refused = onceflow(
        "topics", "create", name, "--replication-factor", "2", "--bootstrap-server", broker.bootstrap
    )
    assert refused.returncode == 1
    # Partitions are replicated: one broker cannot hold two replicas, and the controller says so.
    assert "INVALID_REPLICATION_FACTOR" in refused.stderr and "only 1 broker(s)" in refused.stderr
    created = onceflow("topics", "create", name, "--partitions", "2", "--bootstrap-server", broker.bootstrap)
    assert created.returncode == 0, created.stderr
    described = onceflow("topics", "describe", name, "--bootstrap-server", broker.bootstrap)
    assert described.returncode == 0 and "isr" in described.stdout


def test_cluster_up_does_not_take_an_earlier_runs_ready_line_for_this_one(tmp_path):
    # the node logs are kept across runs; a node that fails at once must not pass for ready because
    # its log still says "listening" from the last run
    data_dir = tmp_path / "c"
    onceflow("cluster", "up", "--brokers", "1", "--data-dir", str(data_dir), "--config", "num.partitions=x")
    (data_dir / "node-1.log").write_text(
        "... INFO onceflow.broker.server: onceflow broker listening on 127.0.0.1:1\n"
    )
    started = onceflow(
        "cluster", "up", "--brokers", "1", "--data-dir", str(data_dir), "--config", "num.partitions=x"
    )
    assert started.returncode == 1
    assert "nodes up" not in started.stdout and "node 1 exited with 2" in started.stderr
    assert "num.partitions must be an integer" in started.stderr


def test_cluster_status_shows_a_killed_broker_still_unfenced_as_unknown_lag():
    # Right after a kill -9 the dead broker is listed (not yet fenced) at a port nobody answers on:
    # the status must still be shown, with that replica's lag unknown, not fail on the connection.
    import asyncio
    from types import SimpleNamespace

    from tests.helpers.broker import free_port

    from onceflow.cli.cluster import _partition_lag

    dead = SimpleNamespace(broker_id=3, host="127.0.0.1", port=free_port(), is_fenced=False)
    partition = SimpleNamespace(partition_index=0, leader_id=3, replica_nodes=[3, 1], isr_nodes=[3, 1])
    topic = SimpleNamespace(name="orders", partitions=[partition])
    result = asyncio.run(_partition_lag([dead], [topic]))
    assert result == [
        {"name": "orders-0", "leader": 3, "isr": [3, 1], "lag": {1: None}, "under_replicated": False}
    ]


def test_cluster_down_stops_the_nodes_in_the_locks_and_nothing_else(tmp_path):
    import json
    import os
    import signal
    import time
    from pathlib import Path

    data_dir = tmp_path / "c"
    (data_dir / "node-1").mkdir(parents=True)
    (data_dir / "node-2").mkdir()
    (data_dir / "cluster.json").write_text(json.dumps({"nodes": []}))
    # a node (restarted by hand, say): a process whose command line is `... serve ... DIR/node-1`
    node = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "serve", str(data_dir / "node-1")]
    )
    try:
        # the child's command line is the new one only once it has exec'd: wait for that (bounded)
        cmdline = Path(f"/proc/{node.pid}/cmdline")
        deadline = time.monotonic() + 30
        while b"serve" not in cmdline.read_bytes().split(b"\0") and time.monotonic() < deadline:
            time.sleep(0.05)
        (data_dir / "node-1" / ".lock").write_text(f"{node.pid}\n")
        # a stale lock whose pid now belongs to something else (this test): left alone
        (data_dir / "node-2" / ".lock").write_text(f"{os.getpid()}\n")
        result = CliRunner().invoke(cli, ["cluster", "down", "--data-dir", str(data_dir)])
        assert result.exit_code == 0, result.output
        assert f"stopping node 1 (pid {node.pid})" in result.output and "node 2" not in result.output
        assert node.wait(30) == -signal.SIGTERM
    finally:
        node.kill()
        node.wait()
    missing = CliRunner().invoke(cli, ["cluster", "down", "--data-dir", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "holds no cluster" in missing.output
