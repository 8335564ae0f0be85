"""The consumer-protocol membership (KIP-848) as a state machine: requests built, answers applied,
reconciliations computed. No broker, no sockets."""

from __future__ import annotations

import uuid

import pytest

from onceflow.client.consumer.classic.membership import Action
from onceflow.client.consumer.kip848.membership import (
    ConsumerMembership,
    MemberState,
    new_member_id,
)
from onceflow.client.consumer.structs import TopicPartition as TP
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import ConsumerGroupHeartbeatResponse as Response

ORDERS = uuid.uuid4()
PAYMENTS = uuid.uuid4()
IDS = {"orders": ORDERS, "payments": PAYMENTS}


def answer(
    epoch: int = 1,
    assignment: dict[uuid.UUID, list[int]] | None = None,
    *,
    error: ErrorCode = ErrorCode.NONE,
    member_id: str | None = None,
    interval_ms: int = 5000,
) -> Response:
    return Response(
        throttle_time_ms=0,
        error_code=int(error),
        error_message="from the test" if error else None,
        member_id=member_id,
        member_epoch=epoch if not error else -1,
        heartbeat_interval_ms=interval_ms if not error else 0,
        assignment=None
        if assignment is None
        else Response.Assignment(
            topic_partitions=[
                Response.Assignment.TopicPartitions(topic_id=t, partitions=ps) for t, ps in assignment.items()
            ]
        ),
    )


def joined(assignment: dict[uuid.UUID, list[int]] | None = None, **kwargs) -> ConsumerMembership:
    """A member that joined (at epoch 1), learned the topic ids and carried out its assignment."""
    m = ConsumerMembership("g", **kwargs)
    m.learn_topic_ids(IDS)
    m.heartbeat_request(["orders"], version=1)
    assert m.on_heartbeat_response(answer(1, assignment or {})).action is Action.NONE
    step = m.reconciliation()
    if step is not None:
        m.revoked(step.revoke)
        m.assigned(step.assign)
    return m


def owned_ids(request) -> set[tuple[uuid.UUID, int]] | None:
    if request.topic_partitions is None:
        return None
    return {(t.topic_id, p) for t in request.topic_partitions for p in t.partitions}


def test_member_ids_are_22_characters_of_url_safe_base64_and_unique():
    ids = {new_member_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 22 and "=" not in i and "/" not in i and "+" not in i for i in ids)


def test_the_joining_heartbeat_is_full_with_the_members_own_id_at_v1():
    m = ConsumerMembership("g", rebalance_timeout_ms=60000, server_assignor="range")
    request = m.heartbeat_request(["payments", "orders"], version=1)
    assert m.state is MemberState.JOINING
    assert request.member_epoch == 0
    assert len(request.member_id) == 22
    assert request.subscribed_topic_names == ["orders", "payments"]
    assert request.subscribed_topic_regex == ""  # with the names: "no regex", as librdkafka sends it
    assert request.rebalance_timeout_ms == 60000
    assert request.server_assignor == "range"
    assert owned_ids(request) == set()


def test_at_v0_the_coordinator_names_the_member():
    m = ConsumerMembership("g")
    request = m.heartbeat_request(["orders"], version=0)
    assert request.member_id == ""
    assert request.subscribed_topic_regex is None  # not in v0
    m.on_heartbeat_response(answer(1, {}, member_id="given-by-coordinator"))
    assert m.member_id == "given-by-coordinator"
    assert m.heartbeat_request(["orders"], version=0).member_id == "given-by-coordinator"


def test_a_steady_heartbeat_carries_only_the_epoch():
    m = joined({ORDERS: [0, 1]})
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(1, {ORDERS: [0, 1]}))  # answers the one reporting ownership
    request = m.heartbeat_request(["orders"], version=1)
    assert request.member_epoch == 1
    assert request.subscribed_topic_names is None
    assert request.subscribed_topic_regex is None
    assert request.topic_partitions is None
    assert request.rebalance_timeout_ms == -1
    assert request.server_assignor is None


def test_an_assignment_is_reconciled_once_its_topic_ids_are_named():
    m = ConsumerMembership("g")
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(3, {ORDERS: [2, 0]}))
    assert m.member_epoch == 3
    assert m.unknown_topic_ids() == {ORDERS}
    assert m.reconciliation() is None  # waits for metadata
    m.learn_topic_ids({"orders": ORDERS})
    step = m.reconciliation()
    assert step.revoke == [] and step.assign == [TP("orders", 0), TP("orders", 2)]
    m.assigned(step.assign)
    assert m.reconciliation() is None
    # The acknowledgement: the next heartbeat reports what is owned now, by topic id.
    assert owned_ids(m.heartbeat_request(["orders"], version=1)) == {(ORDERS, 0), (ORDERS, 2)}


def test_a_shrinking_target_is_revoked_and_the_shrunk_ownership_reported():
    m = joined({ORDERS: [0, 1, 2, 3]})
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(1, {ORDERS: [0, 1]}))  # same epoch: revoke 2 and 3 first
    step = m.reconciliation()
    assert step.revoke == [TP("orders", 2), TP("orders", 3)] and step.assign == []
    m.revoked(step.revoke)
    assert owned_ids(m.heartbeat_request(["orders"], version=1)) == {(ORDERS, 0), (ORDERS, 1)}


def test_ownership_changed_while_a_heartbeat_was_in_flight_is_reported_by_the_next():
    m = joined({ORDERS: [0, 1]})
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(1))  # the joined member's report of [0, 1] was answered
    in_flight = m.heartbeat_request(["orders"], version=1)
    assert in_flight.topic_partitions is None
    m.revoked([TP("orders", 1)])  # reconciled while that heartbeat was on the wire
    m.on_heartbeat_response(answer(1))
    assert owned_ids(m.heartbeat_request(["orders"], version=1)) == {(ORDERS, 0)}


def test_a_subscription_change_is_sent_by_the_next_heartbeat():
    m = joined()
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(1))
    request = m.heartbeat_request(["orders", "payments"], version=1)
    assert request.subscribed_topic_names == ["orders", "payments"]
    assert request.topic_partitions is None


@pytest.mark.parametrize("error", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fencing_loses_the_partitions_and_rejoins_at_epoch_0_under_the_same_id(error):
    m = joined({ORDERS: [0, 1]})
    member_id = m.member_id
    m.heartbeat_request(["orders"], version=1)
    outcome = m.on_heartbeat_response(answer(error=error))
    assert outcome.action is Action.LOST and outcome.error is error
    assert m.lost and m.state is MemberState.UNJOINED
    assert m.lose_partitions() == [TP("orders", 0), TP("orders", 1)]
    assert not m.lost and m.owned == []
    rejoin = m.heartbeat_request(["orders"], version=1)
    assert rejoin.member_epoch == 0 and rejoin.member_id == member_id
    assert rejoin.subscribed_topic_names == ["orders"] and owned_ids(rejoin) == set()


def test_a_lost_answer_makes_the_next_heartbeat_full():
    m = joined({ORDERS: [0]})
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(1))
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_failed()  # connection lost: did the coordinator see it?
    request = m.heartbeat_request(["orders"], version=1)
    assert request.member_epoch == 1
    assert request.subscribed_topic_names == ["orders"]
    assert owned_ids(request) == {(ORDERS, 0)}
    assert request.rebalance_timeout_ms > 0


def test_a_moved_coordinator_is_looked_up_again_and_a_failed_join_retried():
    m = ConsumerMembership("g")
    m.heartbeat_request(["orders"], version=1)
    outcome = m.on_heartbeat_response(answer(error=ErrorCode.NOT_COORDINATOR))
    assert outcome.action is Action.REDISCOVER
    assert m.state is MemberState.UNJOINED  # the join is sent again
    m.heartbeat_request(["orders"], version=1)
    assert (
        m.on_heartbeat_response(answer(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)).action is Action.RETRY
    )


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_ID_NOT_FOUND,
    ],
)
def test_errors_no_retry_can_mend_are_fatal_with_the_coordinators_message(error):
    m = ConsumerMembership("g")
    m.heartbeat_request(["orders"], version=1)
    outcome = m.on_heartbeat_response(answer(error=error))
    assert outcome.action is Action.FATAL
    assert m.fatal is not None and m.fatal.code is error
    assert error.name in str(m.fatal) and "from the test" in str(m.fatal)


def test_a_dynamic_member_leaves_with_epoch_minus_1_and_a_static_one_with_minus_2():
    assert ConsumerMembership("g").leave_request() is None  # never joined: nothing to send
    dynamic = joined({ORDERS: [0]})
    assert dynamic.leave_request().member_epoch == -1
    static = joined({ORDERS: [0]}, group_instance_id="copier-1")
    request = static.leave_request()
    assert request.member_epoch == -2 and request.instance_id == "copier-1"
    static.left()
    assert static.lost and static.state is MemberState.LEFT and not static.active
    assert static.heartbeat_request(["orders"], version=1).member_epoch == 0  # the next poll rejoins


def test_commits_and_transactions_see_the_member_epoch_as_the_generation():
    m = joined({ORDERS: [0]})
    m.heartbeat_request(["orders"], version=1)
    m.on_heartbeat_response(answer(7))
    assert m.active and m.generation_id == 7


def test_a_pattern_goes_to_the_coordinator_as_a_regex_with_no_names():
    m = ConsumerMembership("g")
    request = m.heartbeat_request([], version=1, pattern="orders-.*")
    assert request.subscribed_topic_names == [] and request.subscribed_topic_regex == "orders-.*"
    m.on_heartbeat_response(answer(1, {}))
    steady = m.heartbeat_request([], version=1, pattern="orders-.*")
    assert steady.subscribed_topic_names is None and steady.subscribed_topic_regex is None
    m.on_heartbeat_response(answer(1))
    # Back to names: the empty regex clears the pattern on the coordinator.
    changed = m.heartbeat_request(["orders"], version=1)
    assert changed.subscribed_topic_names == ["orders"] and changed.subscribed_topic_regex == ""


def test_a_pattern_needs_heartbeat_v1():
    m = ConsumerMembership("g")
    with pytest.raises(KafkaError) as refused:
        m.heartbeat_request([], version=0, pattern="orders-.*")
    assert refused.value.code is ErrorCode.UNSUPPORTED_VERSION
