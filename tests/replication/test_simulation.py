"""Seeded simulations of one partition on three brokers (see ``sim``): leader changes, kill -9, power
loss, SIGSTOP, cut links, lost and delayed messages; every acks=all acknowledgement survives, exactly
once, and the replicas agree.

``ONCEFLOW_SIM_SEEDS=300 pytest tests/replication/test_simulation.py`` runs more seeds;
``ONCEFLOW_SIM_SEED=123`` replays one (a failure prints its seed and the last events).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from tests.replication.sim import Simulation

_ONE = os.environ.get("ONCEFLOW_SIM_SEED")
SEEDS = [int(_ONE)] if _ONE else list(range(int(os.environ.get("ONCEFLOW_SIM_SEEDS", "16"))))


def _scratch(tmp_path: Path) -> Path:
    """The brokers' data dirs: in memory when we can (the simulator decides what an fsync keeps, so the
    disk's own fsyncs only cost time)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="of-repl-sim-", dir=shm))
    return tmp_path


@pytest.fixture
def scratch(tmp_path):
    path = _scratch(tmp_path)
    yield path
    if path != tmp_path:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_replication_survives_faults(seed, scratch):
    sim = Simulation(seed, scratch)
    try:
        sim.run()
    except AssertionError as exc:
        pytest.fail(f"{exc}\nreplay: ONCEFLOW_SIM_SEED={seed} pytest {__file__}", pytrace=False)


def test_the_simulation_exercises_the_seeds_stories(scratch):
    """Over a few seeds, the faults do what the checks are about: leaders change, retried batches are
    answered as duplicates by a new leader, and diverging logs are truncated."""
    totals = {"leader_changes": 0, "failover_duplicates": 0, "truncations": 0, "faults": 0}
    for seed in range(6):
        sim = Simulation(1000 + seed, scratch / str(seed))
        sim.run()
        for key in totals:
            totals[key] += sim.stats[key]
    assert totals["faults"] >= 20
    assert totals["leader_changes"] >= 10
    assert totals["failover_duplicates"] >= 3
    assert totals["truncations"] >= 1
