"""Join / sync / heartbeat / leave flows on a fake clock."""

from onceflow.broker.group.state import GroupState
from onceflow.protocol.errors import ErrorCode as E

from .conftest import REBALANCE_MS, SESSION_MS, Harness


def test_first_join_needs_a_member_id_kip394(h):
    first = h.join()
    assert first[0].error is E.MEMBER_ID_REQUIRED
    assert first[0].member_id.startswith("c-")
    assert h.coord.group("g").state is GroupState.EMPTY  # a pending member starts nothing


def test_single_member_is_stable_at_once_without_initial_delay(h):
    res = h.join_new()
    # Answered within the same call: no timer had to fire.
    assert len(res) == 1
    r = res[0]
    assert (r.error, r.generation_id, r.leader_id, r.protocol_name) == (E.NONE, 1, r.member_id, "range")
    assert r.members == ((r.member_id, None, b"r-meta"),)
    assert h.coord.group("g").state is GroupState.COMPLETING_REBALANCE
    synced = h.sync("g", r.member_id, 1, {r.member_id: b"assignment"})
    assert synced[0].error is E.NONE and synced[0].assignment == b"assignment"
    assert h.coord.group("g").state is GroupState.STABLE
    assert h.coord.heartbeat("g", r.member_id, None, 1) is E.NONE


def test_old_clients_join_without_kip394():
    h = Harness()
    res = h.join(require_known=False)
    assert res[0].error is E.NONE and res[0].generation_id == 1


def test_initial_rebalance_delay_waits_and_extends_per_new_member():
    h = Harness(initial_delay_ms=3000)
    a = h.join_new()
    h.clock.advance(2999)
    assert a == []
    b = h.join_new(client_id="b")  # arrives during the delay: one more delay
    h.clock.advance(1)
    assert a == [] and b == []
    h.clock.advance(3000)
    assert a[0].error is E.NONE and b[0].error is E.NONE
    assert a[0].generation_id == b[0].generation_id == 1
    leader = [r for r in (a[0], b[0]) if r.member_id == r.leader_id]
    assert len(leader) == 1 and len(leader[0].members) == 2


def test_initial_delay_is_bounded_by_rebalance_timeout():
    h = Harness(initial_delay_ms=3000)
    a = h.join_new(rebalance_ms=4000)
    h.clock.advance(2000)
    h.join_new(client_id="b", rebalance_ms=4000)
    h.clock.advance(2000)  # 3000 initial + at most 1000 more
    assert a and a[0].error is E.NONE


def test_second_member_triggers_rebalance_and_both_get_generation_2(h):
    r1 = h.stable_single()
    r2 = h.join_new(client_id="b")
    assert r2 == []  # waiting for member 1 to rejoin
    assert h.coord.group("g").state is GroupState.PREPARING_REBALANCE
    assert h.coord.heartbeat("g", r1.member_id, None, 1) is E.REBALANCE_IN_PROGRESS
    assert h.sync("g", r1.member_id, 1)[0].error is E.REBALANCE_IN_PROGRESS
    again = h.join("g", r1.member_id)
    assert again[0].generation_id == r2[0].generation_id == 2
    assert again[0].leader_id == r1.member_id  # the leader keeps its role
    assert len(again[0].members) == 2 and r2[0].members == ()
    # the follower's sync waits for the leader's
    follower = h.sync("g", r2[0].member_id, 2)
    assert follower == []
    leader = h.sync("g", r1.member_id, 2, {r1.member_id: b"L", r2[0].member_id: b"F"})
    assert leader[0].assignment == b"L" and follower[0].assignment == b"F"
    assert h.coord.group("g").state is GroupState.STABLE


def test_unknown_member_and_stale_generation(h):
    r = h.stable_single()
    assert h.coord.heartbeat("g", "nobody", None, 1) is E.UNKNOWN_MEMBER_ID
    assert h.coord.heartbeat("g", r.member_id, None, 0) is E.ILLEGAL_GENERATION
    assert h.sync("g", r.member_id, 7)[0].error is E.ILLEGAL_GENERATION
    assert h.join("g", "nobody")[0].error is E.UNKNOWN_MEMBER_ID
    assert h.coord.heartbeat("nogroup", "x", None, 1) is E.UNKNOWN_MEMBER_ID
    assert h.join("nogroup", "x")[0].error is E.UNKNOWN_MEMBER_ID


def test_bad_join_input(h):
    assert h.join("")[0].error is E.INVALID_GROUP_ID
    assert h.join(session_ms=10)[0].error is E.INVALID_SESSION_TIMEOUT
    assert h.join(protocols=(("range", b"x" * 2_000_000),))[0].error is E.INVALID_REQUEST
    h.stable_single()
    assert h.join(protocols=(("other", b""),))[0].error is E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_takes_the_most_voted_common_assignor(h):
    a = h.join_new(protocols=(("roundrobin", b"a"), ("range", b"a")))
    h.sync("g", a[0].member_id, 1)
    b = h.join_new(client_id="b", protocols=(("range", b"b"), ("roundrobin", b"b")))
    c = h.join_new(client_id="c2", protocols=(("range", b"c"), ("sticky", b"c")))
    a2 = h.join("g", a[0].member_id, protocols=(("roundrobin", b"a"), ("range", b"a")))
    # common = {range}; everybody must vote range
    assert a2[0].protocol_name == b[0].protocol_name == c[0].protocol_name == "range"


def test_session_timeout_removes_a_silent_member(h):
    r = h.stable_single()
    h.clock.advance(SESSION_MS - 1)
    assert h.coord.heartbeat("g", r.member_id, None, 1) is E.NONE
    h.clock.advance(SESSION_MS + 1)
    group = h.coord.group("g")
    assert group.state is GroupState.EMPTY and not group.members
    assert h.coord.heartbeat("g", r.member_id, None, 1) is E.UNKNOWN_MEMBER_ID
    # the empty generation is persisted
    assert h.restart().group("g").generation_id == 2


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout(h):
    r1 = h.stable_single()
    r2 = h.join_new(client_id="b", rebalance_ms=REBALANCE_MS)
    # r1 keeps heartbeating but never rejoins
    for _ in range(REBALANCE_MS // 5000):
        h.clock.advance(5000)
        h.coord.heartbeat("g", r1.member_id, None, 1)
    h.clock.advance(5000)
    assert r2 and r2[0].error is E.NONE and r2[0].leader_id == r2[0].member_id
    assert set(h.coord.group("g").members) == {r2[0].member_id}


def test_leader_that_never_syncs_is_dropped_after_rebalance_timeout(h):
    a = h.join_new()
    assert a[0].error is E.NONE
    h.clock.advance(REBALANCE_MS + 1)
    group = h.coord.group("g")
    assert not group.members and group.state is GroupState.EMPTY


def test_pending_member_that_never_returns_does_not_block_the_group(h):
    r1 = h.stable_single()
    pending = h.join(client_id="b")
    assert pending[0].error is E.MEMBER_ID_REQUIRED
    # The member leaves; its rejoin completes the rebalance despite the pending id... after the
    # pending id expires (session timeout).
    h.coord.leave_group("g", [(r1.member_id, None)])
    assert h.coord.group("g").state is GroupState.PREPARING_REBALANCE or not h.coord.group("g").members
    h.clock.advance(SESSION_MS + 1)
    assert h.coord.group("g").state is GroupState.EMPTY


def test_leave_group_batch(h):
    r1 = h.stable_single()
    r2 = h.join_new(client_id="b")
    h.join("g", r1.member_id)
    top, errors = h.coord.leave_group("g", [(r1.member_id, None), ("ghost", None), (r2[0].member_id, None)])
    assert top is E.NONE and errors == [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE]
    assert h.coord.group("g").state is GroupState.EMPTY
    assert h.coord.leave_group("nogroup", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


def test_leave_wakes_a_rebalance_waiting_for_the_leaver(h):
    r1 = h.stable_single()
    r2 = h.join_new(client_id="b")
    assert r2 == []
    h.coord.leave_group("g", [(r1.member_id, None)])
    assert r2[0].error is E.NONE and r2[0].leader_id == r2[0].member_id


def test_static_member_restart_keeps_assignment_without_rebalance(h):
    leader = h.stable_single(instance_id="i-lead")
    f = h.join("g", instance_id="i-f", client_id="f")  # static: no MEMBER_ID_REQUIRED round
    h.join("g", leader.member_id, instance_id="i-lead")
    assert f[0].error is E.NONE and f[0].generation_id == 2
    h.sync("g", f[0].member_id, 2, instance_id="i-f")
    h.sync("g", leader.member_id, 2, {leader.member_id: b"L", f[0].member_id: b"F"}, instance_id="i-lead")
    # the follower restarts: same instance id, no member id
    again = h.join("g", instance_id="i-f", client_id="f")
    assert again[0].error is E.NONE and again[0].generation_id == 2
    new_id = again[0].member_id
    assert new_id != f[0].member_id
    assert h.coord.group("g").state is GroupState.STABLE
    assert h.sync("g", new_id, 2, instance_id="i-f")[0].assignment == b"F"
    # the old incarnation is fenced everywhere
    assert h.coord.heartbeat("g", f[0].member_id, "i-f", 2) is E.FENCED_INSTANCE_ID
    assert h.sync("g", f[0].member_id, 2, instance_id="i-f")[0].error is E.FENCED_INSTANCE_ID
    assert h.join("g", f[0].member_id, instance_id="i-f")[0].error is E.FENCED_INSTANCE_ID
    assert h.coord.leave_group("g", [(f[0].member_id, "i-f")])[1] == [E.FENCED_INSTANCE_ID]
    # leaving by instance id alone works
    assert h.coord.leave_group("g", [("", "i-f")])[1] == [E.NONE]
    assert h.coord.group("g").state is GroupState.PREPARING_REBALANCE


def test_static_member_keeps_its_place_through_a_rebalance_it_misses(h):
    s = h.join("g", instance_id="i-s", session_ms=60_000)
    h.sync("g", s[0].member_id, 1, {s[0].member_id: b"S"}, instance_id="i-s")
    d = h.join_new(client_id="d")
    h.clock.advance(REBALANCE_MS + 1)  # the static member is bouncing and misses the rejoin
    assert d[0].error is E.NONE
    assert s[0].member_id in h.coord.group("g").members


def test_second_join_of_same_member_answers_the_first(h):
    r1 = h.stable_single()
    h.join_new(client_id="b")
    first = h.join("g", r1.member_id)
    assert first  # completes the rebalance (both joined)
    h.join_new(client_id="c3")
    one = h.join("g", r1.member_id)
    two = h.join("g", r1.member_id)
    assert one[0].error is E.REBALANCE_IN_PROGRESS
    assert two == [] or two[0].error is E.NONE


def test_dead_group_answers_coordinator_not_available(h):
    r = h.join_new()
    h.coord.leave_group("g", [(r[0].member_id, None)])
    assert h.coord.delete_groups(["g"]) == {"g": E.NONE}
    assert h.coord.group("g") is None
    assert h.coord.heartbeat("g", r[0].member_id, None, 1) is E.UNKNOWN_MEMBER_ID
