"""The sans-IO group membership: requests it builds and what it makes of responses (no broker)."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import HeartbeatResponse, JoinGroupResponse, SyncGroupResponse

from onceflow.client.consumer.classic.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from onceflow.client.consumer.classic.membership import (
    TRANSITIONS,
    Action,
    GroupMembership,
    IllegalMemberTransition,
    MemberState,
)
from onceflow.client.consumer.structs import TopicPartition as TP
from onceflow.protocol.errors import ErrorCode


def join_response(error=0, member="m1", leader="m1", generation=1, protocol="range", members=()):
    return JoinGroupResponse(
        error_code=error,
        generation_id=generation,
        protocol_name=protocol,
        leader=leader,
        member_id=member,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, metadata=encode_subscription(s))
            for m, s in members
        ],
    )


def sync_response(partitions, error=0):
    return SyncGroupResponse(error_code=error, assignment=encode_assignment(Assignment(partitions)))


def test_member_id_required_then_join_as_leader_then_sync():
    m = GroupMembership("g", [RangeAssignor()])
    request = m.join_request(["t"])
    assert request.member_id == "" and m.state == MemberState.JOINING
    assert [p.name for p in request.protocols] == ["range"]
    assert decode_subscription(request.protocols[0].metadata).topics == ["t"]
    result = m.on_join_response(join_response(ErrorCode.MEMBER_ID_REQUIRED, member="given-id"))
    assert result.action == Action.REJOIN and m.member_id == "given-id" and m.state == MemberState.UNJOINED
    assert m.join_request(["t"]).member_id == "given-id"
    joined = m.on_join_response(
        join_response(member="given-id", leader="given-id", members=[("given-id", Subscription(["t"]))])
    )
    assert joined.is_leader and set(joined.members) == {"given-id"}
    assignments = m.compute_assignments(joined.members, {"t": 2})
    assert m.sync_request(assignments).assignments[0].member_id == "given-id"
    synced = m.on_sync_response(sync_response([TP("t", 0), TP("t", 1)]))
    assert synced.action == Action.NONE and synced.added == [TP("t", 0), TP("t", 1)]
    assert m.state == MemberState.STABLE and not m.rejoin_needed and m.generation_id == 1


def test_cooperative_sync_reports_revoked_and_asks_for_another_round():
    m = GroupMembership("g", [CooperativeStickyAssignor()])
    m.join_request(["t"])
    m.on_join_response(join_response(protocol="cooperative-sticky", leader="other"))
    m.on_sync_response(sync_response([TP("t", 0), TP("t", 1)]))
    request = m.join_request(["t"])
    # Cooperative members report what they own (KIP-429).
    assert decode_subscription(request.protocols[0].metadata).owned_partitions == [TP("t", 0), TP("t", 1)]
    m.on_join_response(join_response(protocol="cooperative-sticky", leader="other", generation=2))
    synced = m.on_sync_response(sync_response([TP("t", 0)]))
    assert synced.revoked == [TP("t", 1)] and synced.added == []
    assert m.rejoin_needed  # revoked partitions trigger a follow-up rebalance


def test_eager_members_send_no_owned_partitions():
    m = GroupMembership("g", [RangeAssignor(), CooperativeStickyAssignor()])
    assert m.protocol_is_eager
    m.join_request(["t"])
    m.on_join_response(join_response(leader="other"))
    m.on_sync_response(sync_response([TP("t", 0)]))
    request = m.join_request(["t"])
    assert all(decode_subscription(p.metadata).owned_partitions == [] for p in request.protocols)


@pytest.mark.parametrize(
    ("error", "action"),
    [
        (ErrorCode.REBALANCE_IN_PROGRESS, Action.REJOIN),
        (ErrorCode.UNKNOWN_MEMBER_ID, Action.LOST),
        (ErrorCode.ILLEGAL_GENERATION, Action.LOST),
        (ErrorCode.NOT_COORDINATOR, Action.REDISCOVER),
        (ErrorCode.FENCED_INSTANCE_ID, Action.FATAL),
    ],
)
def test_heartbeat_errors(error, action):
    m = GroupMembership("g", [RangeAssignor()])
    m.join_request(["t"])
    m.on_join_response(join_response(leader="other"))
    m.on_sync_response(sync_response([TP("t", 0)]))
    assert m.on_heartbeat_response(HeartbeatResponse(error_code=error)) == action
    if action == Action.LOST:
        assert m.lost and m.lose_partitions() == [TP("t", 0)]


@pytest.mark.parametrize(
    "error", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS], ids=lambda e: e.name
)
def test_a_heartbeat_answer_arriving_after_a_rejoin_started_is_left_to_the_join(error):
    """Kafka's generationUnchanged rule: the heartbeat went out in generation 1, then poll started a
    rejoin; the answer must not reset the member under the JoinGroup in flight."""
    m = GroupMembership("g", [RangeAssignor()])
    m.join_request(["t"])
    m.on_join_response(join_response(leader="other"))
    m.on_sync_response(sync_response([TP("t", 0)]))
    heartbeat = m.heartbeat_request()
    assert heartbeat.generation_id == 1
    m.request_rejoin()
    m.join_request(["t"])
    assert m.on_heartbeat_response(HeartbeatResponse(error_code=error)) == Action.NONE
    assert m.state == MemberState.JOINING and not m.lost
    joined = m.on_join_response(join_response(leader="other", generation=2))
    assert joined.action == Action.NONE and m.state == MemberState.SYNCING


def test_a_heartbeat_answer_about_an_earlier_generation_is_ignored():
    m = GroupMembership("g", [RangeAssignor()])
    m.join_request(["t"])
    m.on_join_response(join_response(leader="other"))
    m.on_sync_response(sync_response([TP("t", 0)]))
    m.heartbeat_request()  # in generation 1
    m.join_request(["t"])
    m.on_join_response(join_response(leader="other", generation=2))
    m.on_sync_response(sync_response([TP("t", 0)]))
    assert m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)) == Action.NONE
    assert m.state == MemberState.STABLE and not m.lost and not m.rejoin_needed
    m.heartbeat_request()  # in generation 2: its answer counts
    assert m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)) == Action.LOST


def test_illegal_transition_names_state_and_event():
    m = GroupMembership("g", [RangeAssignor()])
    with pytest.raises(IllegalMemberTransition, match="UNJOINED"):
        m.on_sync_response(sync_response([]))


def test_every_state_can_be_reset():
    for state in MemberState:
        assert TRANSITIONS[(state, "reset")] == MemberState.UNJOINED
