"""RaftNode, one rule at a time: votes, elections, commitment, divergence, snapshots, observers,
resignation and DescribeQuorum (the simulator then checks them together under faults)."""

from __future__ import annotations

import random

import pytest
from tests.raft.harness import Harness

from onceflow.protocol.errors import ErrorCode
from onceflow.raft.config import RaftConfig
from onceflow.raft.errors import NotLeader
from onceflow.raft.listener import Commit, LeaderChange, LoadSnapshot
from onceflow.raft.memory_storage import MemoryStorage
from onceflow.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    Inbound,
    VoteRequest,
    VoteResponse,
)
from onceflow.raft.node import RaftNode
from onceflow.raft.quorum_state import Role
from onceflow.raft.records import Batch, OffsetAndEpoch
from onceflow.raft.storage import ElectionState


def lone_node(node_id: int = 1, voters=(1, 2, 3), storage: MemoryStorage | None = None, **config) -> RaftNode:
    return RaftNode(
        node_id, voters, storage or MemoryStorage(), RaftConfig(**config), random.Random(0), now_ms=0
    )


def request(node: RaftNode, source: int, body, now: int = 0):
    outputs = node.handle(Inbound(source, 7, body, reply_to=source), now)
    answers = [m.body for m in outputs.messages if m.correlation_id == 7 and m.destination == source]
    return (answers[0] if answers else None), outputs


def log_of(*epochs: int) -> MemoryStorage:
    """A storage whose log has one single-record batch per epoch given."""
    storage = MemoryStorage()
    storage.append([Batch(offset, epoch, 0, (b"x%d" % offset,)) for offset, epoch in enumerate(epochs)])
    storage.flush()
    return storage


# --- votes ---------------------------------------------------------------------------------


def test_a_vote_is_on_disk_before_it_is_granted_and_is_given_once_per_epoch() -> None:
    storage = MemoryStorage()
    node = lone_node(storage=storage)
    answer, _ = request(node, 2, VoteRequest(5, 2, 0, 0))
    assert answer == VoteResponse(ErrorCode.NONE, -1, 5, True)
    assert storage.read_election() == ElectionState(5, None, 2, (1, 2, 3))
    assert node.state.role is Role.VOTED
    answer, _ = request(node, 3, VoteRequest(5, 3, 0, 0))
    assert not answer.vote_granted
    answer, _ = request(node, 2, VoteRequest(5, 2, 0, 0))
    assert answer.vote_granted  # the same candidate asking again (a retry) gets the same answer


@pytest.mark.parametrize(
    ("candidate_end", "granted"),
    [
        (OffsetAndEpoch(3, 2), True),  # same last epoch, same length
        (OffsetAndEpoch(5, 2), True),  # longer
        (OffsetAndEpoch(2, 2), False),  # shorter, same last epoch
        (OffsetAndEpoch(1, 3), True),  # shorter but a later last epoch
        (OffsetAndEpoch(9, 1), False),  # longer but an older last epoch
    ],
)
def test_a_vote_goes_only_to_a_log_at_least_as_up_to_date(
    candidate_end: OffsetAndEpoch, granted: bool
) -> None:
    node = lone_node(storage=log_of(1, 2, 2))
    answer, _ = request(node, 2, VoteRequest(4, 2, candidate_end.epoch, candidate_end.offset))
    assert answer.error == ErrorCode.NONE and answer.vote_granted is granted


def test_vote_requests_from_the_past_or_from_strangers_are_refused_with_kafkas_codes() -> None:
    node = lone_node()
    request(node, 2, VoteRequest(5, 2, 0, 0))
    answer, _ = request(node, 3, VoteRequest(4, 3, 0, 0))
    assert answer.error == ErrorCode.FENCED_LEADER_EPOCH and answer.leader_epoch == 5
    answer, _ = request(node, 9, VoteRequest(6, 9, 0, 0))
    assert answer.error == ErrorCode.INCONSISTENT_VOTER_SET
    answer, _ = request(node, 3, VoteRequest(6, 3, 6, 0))
    assert answer.error == ErrorCode.INVALID_REQUEST  # a last epoch of the epoch it stands for


def test_a_candidate_that_a_majority_refuses_backs_off_then_stands_again() -> None:
    node = lone_node(election_timeout_ms=1000, election_backoff_max_ms=100)
    messages = node.poll(2500).messages + node.poll(2500).messages
    assert node.state.role is Role.CANDIDATE and node.state.epoch == 1
    sent = {m.destination: m.correlation_id for m in messages if isinstance(m.body, VoteRequest)}
    node.handle(Inbound(2, sent[2], VoteResponse(0, -1, 1, False)), 2501)
    node.handle(Inbound(3, sent[3], VoteResponse(0, -1, 1, False)), 2502)
    node.poll(2502 + 100)  # the backoff (at most election.backoff.max.ms), long before the timeout
    assert node.state.role is Role.CANDIDATE and node.state.epoch == 2


# --- elections and commitment --------------------------------------------------------------


def test_three_voters_elect_a_leader_that_commits_its_leader_change_first() -> None:
    h = Harness()
    leader = h.elect()
    epoch = leader.state.epoch
    first = h.storages[leader.node_id].read(0, 1 << 20)[0]
    assert first.is_control and first.control.leader_id == leader.node_id and first.epoch == epoch
    offset = h.append([b"a", b"b"])
    h.run(200)
    for node_id in h.voters:
        assert h.values[node_id] == [b"a", b"b"]
        assert h.nodes[node_id].high_watermark == offset + 1
        assert h.leader_changes(node_id)[-1] == (leader.node_id, epoch)


def test_a_new_leader_knows_when_it_last_heard_from_the_leader_it_replaces() -> None:
    """What the controller activated next dates the old leader's broker session from (combined nodes):
    the time of the last Fetch answer from it, not the time of the election."""
    h = Harness()
    old = h.elect()
    h.run(500)
    crashed_at = h.now
    h.crash(old.node_id)
    new = h.elect()
    leader_id, epoch, heard_ms = new.last_leader_contact
    assert (leader_id, epoch) == (old.node_id, old.state.epoch)
    assert crashed_at - 1000 < heard_ms <= crashed_at < h.now  # the election came later


def test_the_new_leader_tells_its_listener_only_after_it_replayed_every_commit() -> None:
    h = Harness()
    leader = h.elect()
    h.append([b"one"])
    h.run(200)
    h.crash(leader.node_id)
    second = h.elect()
    events = h.events[second.node_id]
    told = events.index(LeaderChange(second.node_id, second.state.epoch))
    seen = [e.batch.records for e in events[:told] if isinstance(e, Commit)]
    assert (b"one",) in seen


def test_an_entry_of_an_old_epoch_is_not_committed_by_counting_copies() -> None:
    # Node 1 leads epoch 3 with an entry of epoch 1 that only it and node 2 have. A fetch from
    # node 2 at offset 2 shows a majority has it, yet nothing is committed until the leader's own
    # LeaderChange (at offset 2) is on a majority too.
    storage = log_of(1, 1)
    storage.write_election(ElectionState(2, voted_id=1, voters=(1, 2, 3)))
    node = lone_node(storage=storage)  # restarts as the candidate of epoch 2
    vote = next(m for m in node.poll(0).messages if m.destination == 2)
    node.handle(Inbound(2, vote.correlation_id, VoteResponse(0, -1, 2, True)), 0)
    assert node.state.role is Role.LEADER and node.leader.epoch_start_offset == 2
    answer, _ = request(node, 2, FetchRequest(2, 2, 2, 1, 0, 1 << 20))
    assert node.high_watermark is None and answer.high_watermark == -1
    answer, _ = request(node, 2, FetchRequest(2, 2, 3, 2, 0, 1 << 20))
    assert node.high_watermark == 3 and answer.high_watermark == 3


def test_append_on_a_follower_raises_not_leader_naming_the_leader() -> None:
    h = Harness()
    leader = h.elect()
    h.run(100)
    follower = next(n for i, n in h.nodes.items() if i != leader.node_id)
    with pytest.raises(NotLeader) as info:
        follower.append([b"x"], h.now)
    assert info.value.leader_id == leader.node_id and info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(NotLeader):
        leader.append([b"x"], h.now, epoch=leader.state.epoch - 1)


def test_a_restarted_leader_comes_back_resigned_and_never_leads_its_old_epoch() -> None:
    h = Harness()
    leader = h.elect()
    epoch = leader.state.epoch
    h.crash(leader.node_id)
    h.start(leader.node_id)
    again = h.nodes[leader.node_id]
    assert again.state.role is Role.RESIGNED and again.state.epoch == epoch
    answer, _ = request(again, 3, VoteRequest(epoch, 3, epoch - 1, 10))
    assert answer.vote_granted is False


# --- replication ---------------------------------------------------------------------------


def test_a_follower_with_entries_of_a_lost_epoch_truncates_where_the_leader_says() -> None:
    # The follower wrote offsets 1-2 in epoch 2 (never committed); the leader's log has epoch 3 from offset 1.
    follower = lone_node(2, storage=log_of(1, 2, 2))
    outputs = follower.handle(Inbound(1, 1, BeginQuorumEpochRequest(1, 3)), 0)
    fetch = [m for m in outputs.messages if isinstance(m.body, FetchRequest)][0]
    assert (fetch.body.fetch_offset, fetch.body.last_fetched_epoch) == (3, 2)
    leader_log = log_of(1, 3, 3, 3)
    kind, point = leader_log.check_fetch(3, 2)
    assert point == OffsetAndEpoch(1, 1)
    outputs = follower.handle(Inbound(1, fetch.correlation_id, FetchResponse(0, 1, 3, -1, 0, (), point)), 1)
    assert follower.storage.log_end_offset == 1
    again = [m for m in outputs.messages if isinstance(m.body, FetchRequest)][0]
    assert (again.body.fetch_offset, again.body.last_fetched_epoch) == (1, 1)


def test_a_follower_below_the_leaders_log_start_loads_the_snapshot_in_chunks() -> None:
    h = Harness(config=RaftConfig(fetch_snapshot_max_bytes=50))
    leader = h.elect()
    h.append([b"k%d" % i for i in range(20)])
    h.run(200)
    writer = leader.create_snapshot(leader.high_watermark, h.now)
    writer.append(h.values[leader.node_id])
    snapshot_id = writer.freeze()
    assert leader.storage.log_start_offset == snapshot_id.offset
    h.append([b"after the snapshot"])
    h.run(200)
    # A voter comes back on a new, empty disk: it can only catch up through the snapshot.
    lagging = next(i for i in h.voters if i != leader.node_id)
    h.crash(lagging)
    h.storages[lagging] = MemoryStorage()
    h.values[lagging] = []
    h.start(lagging)
    h.run(3000)
    assert h.storages[lagging].latest_snapshot_id() == snapshot_id
    loads = [e for e in h.events[lagging] if isinstance(e, LoadSnapshot)]
    assert loads and loads[-1].snapshot.snapshot_id == snapshot_id
    chunks = [
        m for s, m in h.sent if s == leader.node_id and type(m.body).__name__ == "FetchSnapshotResponse"
    ]
    assert len(chunks) > 1
    assert h.values[lagging] == h.values[leader.node_id]
    assert h.values[lagging][-1] == b"after the snapshot"


def test_an_observer_fetches_from_the_leader_it_finds_through_any_voter_and_counts_for_nothing() -> None:
    h = Harness(observers=(100,))
    leader = h.elect()
    h.append([b"seen by the broker"])
    h.run(500)
    observer = h.nodes[100]
    assert observer.state.role is Role.FOLLOWER and observer.state.leader_id == leader.node_id
    assert h.values[100] == [b"seen by the broker"]
    description = leader.describe_quorum(h.now)
    assert [o.replica_id for o in description.observers] == [100]
    assert sorted(v.replica_id for v in description.voters) == [1, 2, 3]
    assert all(v.log_end_offset == leader.storage.log_end_offset for v in description.voters)


def test_a_leader_cut_off_from_the_voters_resigns_and_the_others_elect_a_new_one() -> None:
    h = Harness()
    leader = h.elect()
    h.cut.add(leader.node_id)
    h.run(int(h.config.fetch_timeout_ms * 1.5) + h.config.fetch_max_wait_ms + 100)
    assert h.nodes[leader.node_id].state.role is not Role.LEADER
    new = h.elect()
    assert new.node_id != leader.node_id and new.state.epoch > leader.state.epoch - 1


def test_a_graceful_resignation_hands_over_to_the_first_preferred_successor_at_once() -> None:
    h = Harness()
    leader = h.elect()
    h.run(300)
    old_epoch = leader.state.epoch
    outputs = leader.resign(h.now)
    ends = [m.body for m in outputs.messages if isinstance(m.body, EndQuorumEpochRequest)]
    assert ends and ends[0].preferred_successors
    h.take(leader.node_id, outputs)
    h.run(100)  # far less than a fetch timeout
    new = h.leader()
    assert (
        new is not None
        and new.node_id == ends[0].preferred_successors[0]
        and new.state.epoch == old_epoch + 1
    )
    assert leader.ready_to_stop(h.now)


def test_describe_quorum_on_a_follower_says_who_leads() -> None:
    h = Harness()
    leader = h.elect()
    follower = next(n for i, n in h.nodes.items() if i != leader.node_id)
    answer = follower.describe_quorum(h.now)
    assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.leader_id == leader.node_id


def test_a_single_voter_leads_at_once_and_commits_alone() -> None:
    node = lone_node(1, voters=(1,))
    assert node.state.role is Role.LEADER
    node.append([b"solo"], 0)
    events = node.poll(100).events
    commits = [e.batch.records for e in events if isinstance(e, Commit)]
    assert (b"solo",) in commits and LeaderChange(1, 1) in events


def test_a_candidate_that_cannot_reach_a_voter_counts_it_as_refused_and_backs_off_at_once() -> None:
    # The leader died; the two others stood together and each voted for itself. Node 1 hears node
    # 2's refusal and cannot connect to node 3: it tries the next epoch after a short backoff, not
    # after its election timeout (at least 1000 ms here).
    node = lone_node(election_timeout_ms=1000, election_backoff_max_ms=100)
    messages = node.poll(2500).messages + node.poll(2500).messages
    assert node.state.role is Role.CANDIDATE and node.state.epoch == 1
    sent = {m.destination: m.correlation_id for m in messages if isinstance(m.body, VoteRequest)}
    node.handle(Inbound(2, sent[2], VoteResponse(0, -1, 1, False)), 2501)
    assert node.state.epoch == 1
    node.request_failed(3, sent[3], 2502)
    node.poll(2602)
    assert node.state.role is Role.CANDIDATE and node.state.epoch == 2
