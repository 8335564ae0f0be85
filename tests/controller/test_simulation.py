"""The seeded controller simulation (tests/controller/simulation.py): every seed must keep the
invariants after every step and end with every node's image equal to the log replayed from scratch.

``ONCEFLOW_SIM_SEEDS=N`` runs N seeds instead of the CI's few dozen (a failing seed replays the same
run: ``run_simulation(seed, steps)``).
"""

from __future__ import annotations

import os

import pytest
from tests.controller.simulation import run_simulation

SEEDS = int(os.environ.get("ONCEFLOW_SIM_SEEDS", "40"))
STEPS = 300


@pytest.mark.parametrize("seed", range(SEEDS))
def test_controller_simulation(seed):
    sim = run_simulation(seed, STEPS)
    assert sim.committed == len(sim.log) > 0


@pytest.mark.parametrize("seed", range(max(SEEDS // 4, 1)))
def test_controller_simulation_with_unclean_election(seed):
    run_simulation(1_000_000 + seed, STEPS, unclean=True)


def test_a_seed_replays_the_same_run():
    first, second = run_simulation(7, 150), run_simulation(7, 150)
    assert [b.records for b in first.log] == [b.records for b in second.log]
    assert first.reference == second.reference
