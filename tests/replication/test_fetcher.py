"""The follower's fetch state machine: where it starts, how it finds the divergence point (KIP-101,
KIP-279, KIP-320), out-of-range logs, fencing and back-off."""

from __future__ import annotations

from tests.replication.harness import (
    KEY,
    batch,
    fetcher_for,
    plain_batch,
    registration,
    replica,
    round_trip,
)

from onceflow.broker.replica.fetcher import (
    EpochRequestData,
    FetchRequestData,
    FetchState,
    LeaderOffsetsRequestData,
)
from onceflow.broker.replica.partition import FetchAnswer
from onceflow.protocol.errors import ErrorCode


def epochs(p) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in p.log.leader_epochs.entries()]


def pair(tmp_path, *, leader_epoch=1):
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(registration(1, leader_epoch=leader_epoch), 0)
    follower.become_follower(registration(1, leader_epoch=leader_epoch), 0)
    return leader, follower


def test_fetching_copies_the_leaders_log_and_high_watermark(tmp_path):
    leader, follower = pair(tmp_path)
    leader.append_as_leader(batch(0, 2), 0)
    leader.append_as_leader(batch(2, 3), 0)
    fetcher = fetcher_for(follower)
    state = fetcher.state(KEY)  # no epochs yet: the log was cut at its high watermark (0) at once
    assert (state.state, state.fetch_offset, state.last_fetched_epoch) == (FetchState.FETCHING, 0, -1)
    request = round_trip(fetcher, leader, 10)
    assert isinstance(request, FetchRequestData)
    assert request.partitions[KEY].replica_epoch == 102
    assert follower.log.log_end_offset == 5
    assert leader.log.high_watermark == 0  # broker 3 has nothing
    state = fetcher.state(KEY)
    assert (state.fetch_offset, state.last_fetched_epoch, state.state) == (5, 1, FetchState.FETCHING)
    assert leader.log.read(0, 10**6) == follower.log.read(0, 10**6)


def test_a_follower_with_epochs_starts_at_its_log_end_and_cuts_only_where_it_diverges(tmp_path):
    """KIP-101: a restarted follower does not cut at its (stale) high watermark."""
    leader, follower = pair(tmp_path)
    leader.append_as_leader(batch(0, 4), 0)
    round_trip(fetcher_for(follower), leader, 0)
    assert (follower.log.log_end_offset, follower.log.high_watermark) == (4, 0)
    fetcher = fetcher_for(follower)  # a restart: new fetcher, same log
    fetcher.remove_partition(KEY)
    fetcher.add_partition(follower, 0)
    assert fetcher.state(KEY).state is FetchState.FETCHING
    assert fetcher.state(KEY).fetch_offset == 4
    round_trip(fetcher, leader, 10)
    assert follower.log.log_end_offset == 4


def test_divergence_over_several_epochs_the_follower_never_saw(tmp_path):
    """KIP-279: the old leader A wrote offsets 3..5 in epoch 1 alone; B led epochs 2 and 3 (A saw
    neither) and wrote 3..4. A learns epoch 1 ended at 3 on B, cuts there, and fetches B's batches."""
    a, b = replica(tmp_path, 1), replica(tmp_path, 2)
    a.become_leader(registration(1, leader_epoch=1), 0)
    b.become_follower(registration(1, leader_epoch=1), 0)
    a.append_as_leader(batch(0, 3), 0)
    round_trip(fetcher_for(b), a, 0)
    a.append_as_leader(batch(3, 3), 0)  # only on A
    b.become_leader(registration(2, leader_epoch=2, partition_epoch=2), 0)
    b.become_leader(registration(2, leader_epoch=3, partition_epoch=3), 0)
    b.append_as_leader(batch(3, 2, pid=8), 0)
    a.become_follower(registration(2, leader_epoch=3, partition_epoch=3), 0)
    fetcher = fetcher_for(a)
    round_trip(fetcher, b, 10)  # diverging epoch (1, 3): cut to 3
    assert a.log.log_end_offset == 3
    assert a.log.producer_state.last_entry(7).last_seq == 2  # the state of what was cut is gone
    round_trip(fetcher, b, 20)
    assert a.log.read(0, 10**6) == b.log.read(0, 10**6)
    assert epochs(a) == epochs(b) == [(1, 0), (3, 3)]


def test_offsets_for_leader_epoch_rounds_when_fetches_do_not_truncate(tmp_path):
    """Without truncation on fetch the follower asks OffsetsForLeaderEpoch first, and asks again with
    its own earlier epoch while the leader names one it never had."""
    a, b = replica(tmp_path, 1), replica(tmp_path, 2)
    a.become_leader(registration(1, leader_epoch=1), 0)
    a.append_as_leader(plain_batch(2), 0)
    b.become_follower(registration(1, leader_epoch=1), 0)
    round_trip(fetcher_for(b), a, 0)
    # A leads epoch 2 alone and writes 2..4; then B leads epoch 3 from 2 and writes 2..3.
    a.become_leader(registration(1, leader_epoch=2, partition_epoch=2), 0)
    a.append_as_leader(plain_batch(3), 0)
    b.become_leader(registration(2, leader_epoch=3, partition_epoch=3), 0)
    b.append_as_leader(plain_batch(2), 0)
    a.become_follower(registration(2, leader_epoch=3, partition_epoch=3), 0)
    fetcher = fetcher_for(a, truncate_on_fetch=False)
    assert fetcher.state(KEY).state is FetchState.TRUNCATING
    request = round_trip(fetcher, b, 10)
    assert isinstance(request, EpochRequestData) and request.partitions[KEY] == (3, 2)
    # B answers (1, 2): A never had a different epoch 1 end, so it cuts at 2 and is done.
    assert a.log.log_end_offset == 2 and fetcher.state(KEY).state is FetchState.FETCHING
    assert isinstance(round_trip(fetcher, b, 20), FetchRequestData)
    assert a.log.read(0, 10**6) == b.log.read(0, 10**6)


def test_out_of_range_below_the_leaders_log_start_starts_over_there(tmp_path):
    leader, follower = pair(tmp_path)
    for _ in range(3):
        leader.append_as_leader(plain_batch(2), 0)
    leader.log.update_high_watermark(6)
    leader.log.delete_records_before(4)
    fetcher = fetcher_for(follower)
    round_trip(fetcher, leader, 0)  # fetch at 0: out of range
    assert fetcher.state(KEY).state is FetchState.OUT_OF_RANGE
    assert isinstance(round_trip(fetcher, leader, 10), LeaderOffsetsRequestData)
    assert (follower.log.log_start_offset, follower.log.log_end_offset) == (4, 4)
    round_trip(fetcher, leader, 20)
    assert follower.log.log_end_offset == 6


def test_fenced_partitions_wait_for_metadata_and_other_errors_back_off(tmp_path):
    leader, follower = pair(tmp_path, leader_epoch=2)
    follower.become_follower(registration(1, leader_epoch=1), 0)  # (stale: refused)
    fetcher = fetcher_for(follower)
    leader.append_as_leader(plain_batch(1), 0)
    leader.become_leader(registration(1, leader_epoch=3, partition_epoch=3), 0)  # the follower lags
    round_trip(fetcher, leader, 0)
    assert KEY in fetcher.failed and fetcher.state(KEY) is None
    follower.become_follower(registration(1, leader_epoch=4, partition_epoch=4), 0)  # now ahead
    fetcher.add_partition(follower, 5)
    round_trip(fetcher, leader, 10)  # UNKNOWN_LEADER_EPOCH: back off and retry
    assert fetcher.state(KEY).delayed_until_ms == 110
    assert fetcher.next_request(50) is None
    assert fetcher.next_deadline_ms() == 110


def test_one_request_in_flight_and_stale_answers_are_ignored(tmp_path):
    leader, follower = pair(tmp_path)
    leader.append_as_leader(plain_batch(3), 0)
    fetcher = fetcher_for(follower)
    request = fetcher.next_request(0)
    assert fetcher.next_request(0) is None
    fetcher.handle_fetch(request, None, 0)  # the request failed: back off
    assert fetcher.state(KEY).delayed_until_ms == 100
    request = fetcher.next_request(100)
    fetcher.remove_partition(KEY)
    fetcher.add_partition(follower, 100)
    answer = leader.fetch_for_follower(request.partitions[KEY], 100)
    fetcher.handle_fetch(request, {KEY: answer}, 100)
    assert follower.log.log_end_offset == 3
    bogus = FetchAnswer(ErrorCode.NONE, 3, 3, 0, 3, b"")
    fetcher.handle_fetch(request, {KEY: bogus}, 100)  # an answer to a request no longer in flight
    assert fetcher.state(KEY).fetch_offset == follower.log.log_end_offset


def test_a_leader_whose_authorizer_refuses_us_is_named_once_and_fetching_backs_off(tmp_path, caplog):
    _leader, follower = pair(tmp_path)
    fetcher = fetcher_for(follower)
    denied = FetchAnswer(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with caplog.at_level("WARNING", logger="onceflow.broker.replica.fetcher"):
        for now in (0, 100, 200):
            request = fetcher.next_request(now)
            fetcher.handle_fetch(request, {KEY: denied}, now)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "CLUSTER_ACTION" in warnings[0] and "super user" in warnings[0]
    assert fetcher.state(KEY).delayed_until_ms == 300
