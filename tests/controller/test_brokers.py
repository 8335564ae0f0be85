"""Broker registration, heartbeats (fencing, unfencing, controlled shutdown), session expiry and
UnregisterBroker, with Kafka's error codes."""

from __future__ import annotations

import pytest
from tests.controller.harness import (
    CLUSTER,
    controller,
    create_topics,
    heartbeat,
    live_cluster,
    register,
    run,
    unregister,
)

from onceflow.controller.config import ControllerConfig
from onceflow.controller.quorum_controller import NotController, QuorumController
from onceflow.metadata.records import NO_LEADER, BrokerRegistrationChangeRecord, PartitionChangeRecord
from onceflow.protocol.errors import ErrorCode


def test_registration_gives_the_records_offset_as_broker_epoch_and_starts_fenced():
    ctl, log = controller()
    response = register(ctl, log, 1)
    assert response.error_code == 0
    assert response.broker_epoch == log.batches[-1].base_offset
    broker = ctl.image.broker(1)
    assert broker.fenced and broker.epoch == response.broker_epoch
    assert broker.endpoint("PLAINTEXT").port == 9001


def test_a_broker_is_unfenced_once_caught_up_to_its_registration():
    ctl, log = controller()
    epoch = register(ctl, log, 1).broker_epoch
    behind = heartbeat(ctl, log, 1, offset=epoch - 1)
    assert (behind.is_fenced, behind.is_caught_up) == (True, False)
    assert ctl.image.broker(1).fenced
    caught_up = heartbeat(ctl, log, 1, offset=epoch)
    assert (caught_up.is_fenced, caught_up.is_caught_up, caught_up.should_shut_down) == (False, True, False)
    assert not ctl.image.broker(1).fenced
    assert isinstance(ctl.committed_image.broker(1), object) and not ctl.committed_image.broker(1).fenced


def test_the_same_node_id_with_another_incarnation_is_refused_while_the_session_lives():
    ctl, log = live_cluster(1)
    response = register(ctl, log, 1, now_ms=1000, incarnation=77)
    assert response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # after the session expired the new incarnation takes over, with a new epoch, fenced
    old_epoch = ctl.image.broker(1).epoch
    later = ctl.config.broker_session_timeout_ms + 1
    response = register(ctl, log, 1, now_ms=later, incarnation=77)
    assert response.error_code == 0 and response.broker_epoch > old_epoch
    assert ctl.image.broker(1).fenced


def test_the_same_incarnation_registering_again_keeps_its_epoch_and_state():
    ctl, log = live_cluster(1)
    epoch = ctl.image.broker(1).epoch
    response = register(ctl, log, 1, now_ms=10)
    assert response.broker_epoch == epoch and not ctl.image.broker(1).fenced


def test_a_new_incarnation_leaves_its_old_leaderships_and_isrs_first():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2]}))
    later = ctl.config.broker_session_timeout_ms + 1
    heartbeat(ctl, log, 2, now_ms=later)
    start = log.end_offset
    register(ctl, log, 1, now_ms=later, incarnation=99)
    written = [r for b in log.batches if b.base_offset >= start for r in b.records]
    assert len(written) == 2  # the partition change, then the registration
    partition = ctl.image.partition("t", 0)
    assert (partition.leader, partition.isr) == (2, (2,))


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"metadata_versions": (1, 13)}, ErrorCode.UNSUPPORTED_VERSION),
        ({"metadata_versions": (15, 20)}, ErrorCode.UNSUPPORTED_VERSION),
    ],
)
def test_a_broker_that_cannot_run_the_metadata_version_is_refused(kwargs, code):
    ctl, log = controller()
    assert register(ctl, log, 1, **kwargs).error_code == code
    assert ctl.image.broker(1) is None


def test_a_broker_of_another_cluster_is_refused():
    ctl, log = controller()
    from onceflow.protocol.messages import BrokerRegistrationRequest

    request = BrokerRegistrationRequest(
        broker_id=1,
        cluster_id="other",
        incarnation_id=__import__("uuid").uuid4(),
        listeners=[],
        features=[],
        rack=None,
    )
    assert run(ctl, log, ctl.register_broker(request, 0)).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert CLUSTER != "other"


def test_heartbeats_with_a_stale_epoch_or_unknown_broker_are_refused():
    ctl, log = live_cluster(1)
    assert heartbeat(ctl, log, 1, epoch=12345).error_code == ErrorCode.STALE_BROKER_EPOCH
    from onceflow.protocol.messages import BrokerHeartbeatRequest

    request = BrokerHeartbeatRequest(
        broker_id=9, broker_epoch=1, current_metadata_offset=0, want_fence=False, want_shut_down=False
    )
    assert run(ctl, log, ctl.broker_heartbeat(request, 0)).error_code == ErrorCode.STALE_BROKER_EPOCH


def test_session_expiry_fences_the_broker_and_moves_its_leaderships():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", {0: [1, 2, 3]}), ("solo", {0: [1]}), ("other", {0: [2, 3]}))
    timeout = ctl.config.broker_session_timeout_ms
    # 2 and 3 keep heartbeating; 1 goes silent
    for now in (timeout // 2, timeout):
        heartbeat(ctl, log, 2, now_ms=now)
        heartbeat(ctl, log, 3, now_ms=now)
    assert ctl.next_deadline_ms() == timeout + 1
    results = ctl.poll(timeout + 1)
    assert len(results) == 1
    for result in results:
        run(ctl, log, result)
    image = ctl.image
    assert image.broker(1).fenced
    assert (image.partition("t", 0).leader, image.partition("t", 0).isr) == (2, (2, 3))
    # the only replica of solo-0 is gone: no leader, and the ISR keeps it (never empty)
    assert (image.partition("solo", 0).leader, image.partition("solo", 0).isr) == (NO_LEADER, (1,))
    assert image.partition("other", 0).partition_epoch == 0  # untouched
    # coming back (same incarnation, caught up) it is unfenced and leads solo-0 again
    heartbeat(ctl, log, 1, now_ms=timeout + 2)
    assert ctl.image.partition("solo", 0).leader == 1
    assert ctl.image.partition("t", 0).leader == 2  # no automatic move back here


def _fail_over(ctl, log, now_ms: int, previous_leader):
    """The controller loses the quorum and wins it again in the next epoch (standing in for another
    node's controller: the committed image is all it keeps), knowing ``previous_leader``."""
    ctl.renounce()
    epoch = ctl.epoch + 1
    result = ctl.activate(epoch, log.end_offset, now_ms, previous_leader=previous_leader)
    run(ctl, log, result)


def test_after_a_controller_failover_the_old_leaders_broker_is_fenced_a_session_after_it_fell_silent():
    """Combined nodes: the quorum's previous leader (node 1) is also broker 1, and its process died
    with it. Its session dates from the new controller's last word from it, so it is fenced a session
    timeout after that, not a whole session timeout after the new controller's election (as Kafka's
    fresh sessions at activation would); the other brokers start with fresh sessions."""
    ctl, log = live_cluster(3)
    assert ctl.config.node_id not in (2, 3)  # node 3 led the quorum before this controller
    create_topics(ctl, log, ("t", {0: [3, 1, 2]}))
    timeout = ctl.config.broker_session_timeout_ms
    heard, activated = 10_000, 12_500  # the election took 2.5 s after the last fetch answered
    _fail_over(ctl, log, activated, previous_leader=(3, heard))
    assert ctl.next_deadline_ms() == heard + timeout + 1
    for result in ctl.poll(heard + timeout + 1):
        run(ctl, log, result)
    assert ctl.image.broker(3).fenced
    assert not ctl.image.broker(1).fenced and not ctl.image.broker(2).fenced
    assert ctl.image.partition("t", 0).leader == 1
    # Brokers 2 and 3 still have their whole session from the activation.
    assert ctl.poll(activated + timeout) == []


def test_a_live_old_leader_keeps_its_session_by_heartbeating_or_is_unfenced_by_its_next_heartbeat():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", {0: [3, 1, 2]}))
    timeout = ctl.config.broker_session_timeout_ms
    # Alive after all, heartbeating to the new controller in time: nothing happens.
    _fail_over(ctl, log, 10_000, previous_leader=(3, 9_000))
    heartbeat(ctl, log, 3, now_ms=10_500)
    assert ctl.poll(9_000 + timeout + 1) == []
    assert not ctl.image.broker(3).fenced
    # The last word was longer ago than a session: fenced at once; its next heartbeat (caught up)
    # unfences it, and it is in the ISR it never lost data from.
    _fail_over(ctl, log, 50_000, previous_leader=(3, 50_000 - 2 * timeout))
    for result in ctl.poll(50_000):
        run(ctl, log, result)
    assert ctl.image.broker(3).fenced and 3 not in ctl.image.partition("t", 0).isr
    assert heartbeat(ctl, log, 3, now_ms=50_100).is_fenced is False
    assert not ctl.image.broker(3).fenced


def test_activation_dates_no_session_back_for_itself_or_an_unknown_or_fenced_broker():
    ctl, log = live_cluster(3)
    timeout = ctl.config.broker_session_timeout_ms
    node = ctl.config.node_id
    for previous in ((node, 0), (9, 0), None):
        _fail_over(ctl, log, 100_000, previous_leader=previous)
        assert ctl.next_deadline_ms() == min(100_000 + timeout + 1, ctl._next_unclean_ms)  # noqa: SLF001
        for b in (1, 2, 3):
            heartbeat(ctl, log, b, now_ms=100_000)


def test_want_fence_fences_and_want_shut_down_without_leaderships_stops_at_once():
    ctl, log = live_cluster(2)
    fenced = heartbeat(ctl, log, 1, want_fence=True)
    assert fenced.is_fenced and not fenced.should_shut_down and ctl.image.broker(1).fenced
    stop = heartbeat(ctl, log, 2, want_shut_down=True)
    assert stop.should_shut_down and stop.is_fenced and ctl.image.broker(2).fenced


def test_controlled_shutdown_moves_leaderships_first():
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", {0: [1, 2], 1: [2, 1]}), ("solo", {0: [1]}))
    start = log.end_offset
    first = heartbeat(ctl, log, 1, want_shut_down=True)
    assert (first.should_shut_down, first.is_fenced) == (False, False)
    written = [r for b in log.batches if b.base_offset >= start for r in b.records]
    assert len(written) == 4  # in controlled shutdown, then t-0, t-1, solo-0
    image = ctl.image
    assert image.broker(1).in_controlled_shutdown and not image.is_active(1)
    assert (image.partition("t", 0).leader, image.partition("t", 0).isr) == (2, (2,))
    assert image.partition("t", 1).isr == (2,)
    assert image.partition("solo", 0).leader == NO_LEADER
    # broker 2 has not yet replayed the shutdown records: broker 1 must wait
    heartbeat(ctl, log, 2, offset=start - 1)
    waiting = heartbeat(ctl, log, 1, want_shut_down=True)
    assert not waiting.should_shut_down
    heartbeat(ctl, log, 2)
    heartbeat(ctl, log, 3)
    done = heartbeat(ctl, log, 1, want_shut_down=True)
    assert done.should_shut_down and ctl.image.broker(1).fenced


def test_unregister_takes_the_broker_out_of_everything():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2]}))
    assert unregister(ctl, log, 1).error_code == 0
    assert ctl.image.broker(1) is None
    assert (ctl.image.partition("t", 0).leader, ctl.image.partition("t", 0).isr) == (2, (2,))
    again = unregister(ctl, log, 1)
    assert again.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_a_standby_controller_refuses_operations():
    standby = QuorumController(ControllerConfig(node_id=2))
    from onceflow.protocol.messages import BrokerHeartbeatRequest

    with pytest.raises(NotController):
        standby.broker_heartbeat(
            BrokerHeartbeatRequest(
                broker_id=1, broker_epoch=1, current_metadata_offset=0, want_fence=False, want_shut_down=False
            ),
            0,
        )
    assert standby.poll(10**9) == []


def test_fencing_writes_kafkas_records():
    ctl, log = live_cluster(2)
    create_topics(ctl, log, ("t", {0: [1, 2]}))
    result = ctl.poll(ctl.config.broker_session_timeout_ms + 1)
    kinds = [type(r) for res in result for r in res.records]
    assert kinds == [PartitionChangeRecord, BrokerRegistrationChangeRecord] * 2
