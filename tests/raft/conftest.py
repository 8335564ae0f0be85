"""The quorum simulator's seed option: ``pytest tests/raft --raft-seed=N`` (or the environment
variable ``ONCEFLOW_RAFT_SEED=N``) replays one seed instead of the CI sweep."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def raft_seed(request: pytest.FixtureRequest) -> int | None:
    seed = request.config.getoption("--raft-seed")
    if seed is None and os.environ.get("ONCEFLOW_RAFT_SEED"):
        seed = int(os.environ["ONCEFLOW_RAFT_SEED"])
    return seed
