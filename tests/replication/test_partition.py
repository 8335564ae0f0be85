"""A replicated partition's leader rules (Kafka's Partition): epochs, ISR changes, high watermark,
acks=all and min.insync.replicas, follower fetches."""

from __future__ import annotations

import pytest
from tests.replication.harness import (
    LAG_MS,
    Brokers,
    batch,
    commit_alter,
    plain_batch,
    registration,
    replica,
)

from onceflow.broker.replica.isr import FollowerProgress
from onceflow.broker.replica.partition import NO_EPOCH, FollowerFetch
from onceflow.protocol.errors import ErrorCode, NotEnoughReplicas, NotLeaderOrFollower


def fetch(replica_id, offset, *, epoch=1, last_epoch=NO_EPOCH, broker_epoch=None):
    return FollowerFetch(
        replica_id,
        100 + replica_id if broker_epoch is None else broker_epoch,
        offset,
        0,
        epoch,
        last_epoch,
        1 << 20,
    )


def test_a_new_leader_records_its_epoch_start_and_a_single_replica_commits_at_once(tmp_path):
    p = replica(tmp_path, 1)
    p.log.append(plain_batch(3))  # written before (e.g. as a follower)
    assert p.become_leader(registration(1, isr=(1,), replicas=(1,), leader_epoch=4), 0)
    assert [(e.epoch, e.start_offset) for e in p.log.leader_epochs.entries()] == [(4, 3)]
    assert p.log.high_watermark == 3  # ISR of one: the HW is the log end
    p.append_as_leader(plain_batch(2), 0)
    assert p.log.high_watermark == 5
    assert not p.become_leader(registration(1, isr=(1,), replicas=(1,), leader_epoch=4), 0)  # not new


def test_min_insync_replicas_refuses_acks_all_before_writing(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1,)), 0)
    with pytest.raises(NotEnoughReplicas):
        p.append_as_leader(plain_batch(), 0, required_acks=-1)
    assert p.log.log_end_offset == 0
    assert p.append_as_leader(plain_batch(), 0, required_acks=1).base_offset == 0
    assert p.log.high_watermark == 0  # under min.insync.replicas the high watermark stays (Kafka 3.7+)


def test_min_insync_replicas_is_capped_by_the_replication_factor(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1,), replicas=(1,)), 0)
    p.append_as_leader(plain_batch(), 0, required_acks=-1)  # min.insync.replicas=2 but one replica
    assert p.check_enough_replicas(1) == (True, ErrorCode.NONE)


def test_a_deposed_leader_refuses_produce(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1), 0)
    assert p.become_follower(registration(2, leader_epoch=2, partition_epoch=2), 0)
    with pytest.raises(NotLeaderOrFollower):
        p.append_as_leader(plain_batch(), 0)
    # Metadata older than what the partition knows changes nothing.
    assert not p.become_leader(registration(1, leader_epoch=1, partition_epoch=1), 0)
    assert not p.is_leader


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(0, ErrorCode.FENCED_LEADER_EPOCH), (2, ErrorCode.UNKNOWN_LEADER_EPOCH), (1, ErrorCode.NONE)],
)
def test_follower_fetches_are_checked_against_the_leader_epoch(tmp_path, epoch, expected):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1), 0)
    assert p.fetch_for_follower(fetch(2, 0, epoch=epoch), 0).error == expected


def test_fetches_from_strangers_and_previous_incarnations_are_refused(tmp_path):
    brokers = Brokers()
    p = replica(tmp_path, 1, brokers)
    p.become_leader(registration(1, isr=(1, 2), replicas=(1, 2)), 0)
    assert p.fetch_for_follower(fetch(3, 0), 0).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert p.fetch_for_follower(fetch(3, 0, epoch=NO_EPOCH), 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    brokers.epochs[2] = 200  # broker 2 restarted and registered again
    assert p.fetch_for_follower(fetch(2, 0, broker_epoch=102), 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.fetch_for_follower(fetch(2, 0, broker_epoch=200), 0).error == ErrorCode.NONE


def test_the_high_watermark_is_the_lowest_log_end_of_the_isr_and_acks_all_waits_for_it(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1), 0)
    p.append_as_leader(plain_batch(5), 0)
    assert p.check_enough_replicas(5) == (False, ErrorCode.NONE)
    p.fetch_for_follower(fetch(2, 5), 10)
    assert p.log.high_watermark == 0  # broker 3 has nothing yet
    p.fetch_for_follower(fetch(3, 3), 10)
    assert p.log.high_watermark == 3
    assert p.check_enough_replicas(5) == (False, ErrorCode.NONE)
    p.fetch_for_follower(fetch(3, 5), 20)
    assert p.log.high_watermark == 5
    assert p.check_enough_replicas(5) == (True, ErrorCode.NONE)


def test_a_diverging_follower_is_told_where_its_epoch_ended(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, leader_epoch=1), 0)
    p.append_as_leader(plain_batch(4), 0)
    p.become_leader(registration(1, leader_epoch=3, partition_epoch=2), 0)
    p.append_as_leader(plain_batch(2), 0)
    # The follower wrote offsets 4.. in epoch 2, which this leader never had.
    answer = p.fetch_for_follower(fetch(2, 6, epoch=3, last_epoch=2), 0)
    assert (answer.error, answer.diverging_epoch, answer.records) == (ErrorCode.NONE, (1, 4), b"")
    answer = p.fetch_for_follower(fetch(2, 4, epoch=3, last_epoch=1), 0)
    assert answer.diverging_epoch is None and answer.records
    assert p.fetch_for_follower(fetch(2, 4, epoch=3, last_epoch=9), 0).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert p.fetch_for_follower(fetch(2, 99, epoch=3), 0).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_isr_expansion_counts_the_new_member_at_once_and_commits_through_the_controller(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1, 2)), 0)
    p.append_as_leader(plain_batch(4), 0)
    p.fetch_for_follower(fetch(2, 4), 0)
    assert p.log.high_watermark == 4
    p.append_as_leader(plain_batch(2), 0)
    p.fetch_for_follower(fetch(3, 4), 10)  # caught up to the high watermark: it may join
    [proposal] = p.drain_alter_partitions()
    assert proposal.new_isr == ((1, 101), (2, 102), (3, 103))
    assert (proposal.leader_epoch, proposal.partition_epoch) == (1, 1)
    assert p.isr == {1, 2} and p.maximal_isr == {1, 2, 3} and p.isr_update_in_flight
    p.fetch_for_follower(fetch(2, 6), 20)
    assert p.log.high_watermark == 4  # broker 3, pending, holds it back
    p.fetch_for_follower(fetch(3, 5), 30)
    assert p.drain_alter_partitions() == []  # one change at a time
    commit_alter(p, 40, [proposal])
    assert p.isr == {1, 2, 3} and not p.isr_update_in_flight and p.partition_epoch == 2
    p.fetch_for_follower(fetch(3, 6), 50)
    assert p.log.high_watermark == 6


def test_a_follower_joins_the_isr_only_once_it_reaches_the_current_epoch(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1, 2), leader_epoch=1), 0)
    p.append_as_leader(plain_batch(4), 0)
    p.fetch_for_follower(fetch(2, 4), 0)
    p.become_leader(registration(1, isr=(1, 2), leader_epoch=2, partition_epoch=2), 0)  # epoch 2 from 4
    p.append_as_leader(plain_batch(1), 0)
    p.fetch_for_follower(fetch(2, 5, epoch=2), 0)
    p.log.update_high_watermark(2)  # (a high watermark below the epoch start)
    p.fetch_for_follower(fetch(3, 3, epoch=2), 10)
    assert p.drain_alter_partitions() == []
    p.fetch_for_follower(fetch(3, 4, epoch=2), 20)
    assert [pr.isr_ids for pr in p.drain_alter_partitions()] == [{1, 2, 3}]


@pytest.mark.parametrize(
    ("error", "requeued", "reverted"),
    [
        (ErrorCode.INELIGIBLE_REPLICA, False, True),
        (ErrorCode.OPERATION_NOT_ATTEMPTED, False, True),
        (ErrorCode.INVALID_UPDATE_VERSION, False, False),
        (ErrorCode.FENCED_LEADER_EPOCH, False, False),
        (ErrorCode.REQUEST_TIMED_OUT, True, False),
        (ErrorCode.NOT_CONTROLLER, True, False),
    ],
)
def test_alter_partition_errors(tmp_path, error, requeued, reverted):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1, 2)), 0)
    p.fetch_for_follower(fetch(3, 0), 0)
    [proposal] = p.drain_alter_partitions()
    p.handle_alter_partition(proposal, error, 10)
    assert (p.drain_alter_partitions() == [proposal]) == requeued
    assert (not p.isr_update_in_flight) == reverted
    assert p.isr == {1, 2}


def test_an_answer_to_a_forgotten_proposal_is_ignored(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1, 2)), 0)
    p.fetch_for_follower(fetch(3, 0), 0)
    [proposal] = p.drain_alter_partitions()
    p.become_leader(registration(1, isr=(1,), leader_epoch=1, partition_epoch=5), 0)  # the metadata moved on
    p.handle_alter_partition(proposal, ErrorCode.NONE, 10, leader_epoch=1, partition_epoch=2, isr=(1, 2, 3))
    assert p.isr == {1} and p.partition_epoch == 5


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1), 0)
    p.append_as_leader(plain_batch(3), 0)
    p.fetch_for_follower(fetch(2, 3), 100)
    p.fetch_for_follower(fetch(3, 0), 100)
    p.poll(LAG_MS)  # broker 3 was caught up when the epoch began (time 0): not yet out
    assert p.drain_alter_partitions() == []
    p.fetch_for_follower(fetch(2, 3), LAG_MS + 1)
    p.poll(LAG_MS + 1)
    [proposal] = p.drain_alter_partitions()
    assert proposal.isr_ids == {1, 2}
    assert p.maximal_isr == {1, 2, 3} and p.log.high_watermark == 0  # not gone until committed
    commit_alter(p, LAG_MS + 2, [proposal])
    assert p.isr == {1, 2} and p.log.high_watermark == 3


def test_acks_all_after_the_isr_fell_below_min_insync_replicas(tmp_path):
    p = replica(tmp_path, 1)
    p.become_leader(registration(1, isr=(1, 2)), 0)
    p.append_as_leader(plain_batch(2), 0)
    p.fetch_for_follower(fetch(2, 2), 10)
    assert p.check_enough_replicas(2) == (True, ErrorCode.NONE)
    p.append_as_leader(plain_batch(1), 20, required_acks=-1)
    p.poll(LAG_MS + 20)  # broker 2 fell behind; broker 3 was never in sync
    commit_alter(p, LAG_MS + 30)
    assert p.isr == {1}
    p.log.update_high_watermark(3)  # (as if broker 2 had fetched it just before leaving)
    assert p.check_enough_replicas(3) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    with pytest.raises(NotEnoughReplicas):
        p.append_as_leader(plain_batch(), 40, required_acks=-1)


def test_follower_progress_caught_up_rule():
    progress = FollowerProgress(last_fetch_leader_log_end_offset=10, last_fetch_time_ms=0)
    progress = progress.after_fetch(8, 0, 100, 12, 5)  # behind, not even at the previous leader end
    assert progress.last_caught_up_time_ms == 0
    progress = progress.after_fetch(12, 0, 200, 15, 5)  # reached the end the leader had at the last fetch
    assert progress.last_caught_up_time_ms == 100
    progress = progress.after_fetch(15, 0, 300, 15, 5)  # at the leader's end now
    assert progress.last_caught_up_time_ms == 300
    assert progress.is_caught_up(15, 10**9, 1)
    assert not progress.is_caught_up(16, 300 + LAG_MS + 1, LAG_MS)


def test_a_follower_takes_the_leaders_high_watermark_within_its_own_log(tmp_path):
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(registration(1), 0)
    follower.become_follower(registration(1), 0)
    leader.append_as_leader(batch(0, 3), 0)
    answer = leader.fetch_for_follower(fetch(2, 0), 0)
    result = follower.append_as_follower(answer.records, 100, 0)
    assert (result.first_offset, result.last_offset, result.last_leader_epoch) == (0, 2, 1)
    assert follower.log.high_watermark == 3  # 100 from the leader, cut to its own end
    assert follower.log.producer_state.last_entry(7).last_seq == 2
