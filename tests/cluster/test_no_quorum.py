"""A node of a 3-voter quorum started alone cannot elect a leader: it does not get ready, and its log
says why (a majority of the voters must be up)."""

from __future__ import annotations

import time

import pytest
from tests.helpers.cluster import ClusterNodes

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
pytest.importorskip("onceflow.raft.server", reason="the Raft quorum is not in this build yet")

WAIT_S = 40.0


def test_one_voter_of_three_waits_for_a_majority_and_says_so(tmp_path):
    cluster = ClusterNodes(tmp_path, 3)
    lonely = cluster.nodes[1]
    lonely.start_nowait()
    try:
        deadline = time.monotonic() + WAIT_S
        while "needs a majority of its voters" not in lonely.log_text() and time.monotonic() < deadline:
            assert lonely.running, lonely.log_text()[-2000:]
            time.sleep(0.2)
        text = lonely.log_text()
        assert "needs a majority of its voters" in text and "3 voters, 2 needed" in text
        assert "onceflow broker listening on" not in text
    finally:
        lonely.kill9()
