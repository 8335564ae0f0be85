"""The quorum as three real processes on loopback (``onceflow.raft.demo``): kill -9 the leader and a
new one is elected and commits; the old one comes back as a follower with its data; a node killed
in the middle of writing its quorum-state comes back and agrees. What each process applied is
checked against the others: every life of every node saw one and the same committed sequence."""

from __future__ import annotations

import pytest
from tests.raft.processes import Quorum

from onceflow.raft.demo import digest

pytestmark = pytest.mark.slow


@pytest.fixture
def quorum(tmp_path):
    quorum = Quorum(tmp_path, args=["--append-every-ms", "50", "--snapshot-every", "40"])
    yield quorum
    quorum.stop_all()


def assert_one_history(quorum: Quorum) -> int:
    """Every process life applied a prefix of one sequence (after the snapshot it started from, if
    any); returns the length of the longest."""
    lives = [node.values(life) for node in quorum.nodes.values() for life in range(len(node.lives))]
    plain = [values for values in lives if not (values and values[0].startswith("<snapshot"))]
    reference = max(plain, key=len)
    for values in lives:
        start = 0
        if values and values[0].startswith("<snapshot"):
            count, fingerprint = values[0][len("<snapshot of ") : -1].split(": ")
            start = int(count)
            assert digest(reference[:start]) == fingerprint, (
                "a snapshot is not a prefix of the committed values"
            )
            values = values[1:]
        assert values == reference[start : start + len(values)], "two processes applied different histories"
    return len(reference)


def committed_by(node, leader: int) -> int:
    return sum(1 for v in node.values() if v.startswith(f"{leader}:"))


def test_kill_the_leader_a_new_one_commits_and_the_old_one_rejoins_with_its_data(quorum: Quorum) -> None:
    quorum.start_all()
    all_ids = list(quorum.nodes)
    first = quorum.wait_for("a leader", lambda: quorum.agreed_leader(all_ids))
    quorum.wait_for(
        "commits everywhere", lambda: all(committed_by(n, first) >= 20 for n in quorum.nodes.values())
    )
    old = quorum.nodes[first]
    before = max(len(n.values()) for n in quorum.nodes.values())
    old.kill()  # kill -9
    survivors = [i for i in all_ids if i != first]
    second = quorum.wait_for(
        "a new leader", lambda: (lead := quorum.agreed_leader(survivors)) not in (None, first) and lead
    )
    quorum.wait_for(
        "commits of the new leader",
        lambda: all(committed_by(quorum.nodes[i], second) >= 10 for i in survivors),
    )
    old.start()
    quorum.wait_for(
        "the old leader following", lambda: old.leader() is not None and old.leader()[0] == second
    )
    quorum.wait_for("the old leader catching up", lambda: committed_by(old, second) >= 10)
    assert assert_one_history(quorum) > before
    # It came back as a follower: it never led again in this run.
    assert all(e["leader"] != first for e in old.events() if e["event"] == "leader")


@pytest.mark.parametrize("fault", ["kill-before-quorum-state-write", "kill-after-quorum-state-write"])
def test_a_node_killed_while_writing_its_quorum_state_restarts_and_agrees(quorum: Quorum, fault: str) -> None:
    # Node 3 dies at its second quorum-state write: its first vote or epoch change after start.
    victim = quorum.nodes[3]
    quorum.nodes[1].start()
    quorum.nodes[2].start()
    victim.start(["--fault", f"{fault}=2"])
    quorum.wait_for("the victim to die", lambda: not victim.alive)
    assert victim.proc.returncode == -9
    leader = quorum.wait_for("a leader of the other two", lambda: quorum.agreed_leader([1, 2]))
    victim.start()
    quorum.wait_for(
        "the victim following", lambda: victim.leader() is not None and victim.leader()[0] == leader
    )
    quorum.wait_for("the victim applying new commits", lambda: committed_by(victim, leader) >= 5)
    assert not list(victim.data_dir.glob("__cluster_metadata-0/quorum-state.tmp")) or victim.alive
    assert_one_history(quorum)


def test_sigterm_on_the_leader_hands_over_without_waiting_for_a_timeout(quorum: Quorum) -> None:
    quorum.start_all()
    all_ids = list(quorum.nodes)
    first = quorum.wait_for("a leader", lambda: quorum.agreed_leader(all_ids))
    assert quorum.nodes[first].terminate() == 0
    stopped = quorum.nodes[first].events()[-1]
    # It resigned, and every other voter acknowledged its EndQuorumEpoch before it exited.
    assert stopped["event"] == "stopped" and stopped["resigned"] is True and stopped["unacknowledged"] == []
    survivors = [i for i in all_ids if i != first]
    second = quorum.wait_for("a successor", lambda: quorum.agreed_leader(survivors))
    assert second != first
    assert_one_history(quorum)
