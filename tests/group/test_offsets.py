"""Offset commit / fetch / expiry / deletion and replay of ``__consumer_offsets``."""

import pytest

from onceflow.broker.group import log_format as fmt
from onceflow.broker.group.coordinator import GroupCoordinator, OffsetCommitEntry
from onceflow.broker.group.state import GroupState
from onceflow.protocol.errors import CoordinatorLoadInProgress
from onceflow.protocol.errors import ErrorCode as E

from .conftest import SESSION_MS, Harness

TP0, TP1 = ("t", 0), ("t", 1)


def commit(h, offsets, group="g", member="", generation=-1, instance=None, **kw):
    entries = {tp: OffsetCommitEntry(off) for tp, off in offsets.items()}
    return h.coord.commit_offsets(group, member, instance, generation, entries, **kw)


def fetched(h, group="g", tps=None, **kw):
    top, rows = h.coord.fetch_offsets(group, tps, **kw)
    assert top is E.NONE
    return {tp: (v.offset if v else None, err) for tp, v, err in rows}


def test_simple_commit_and_fetch(h):
    assert commit(h, {TP0: 5, TP1: 9}) == (E.NONE, {TP0: E.NONE, TP1: E.NONE})
    assert fetched(h) == {TP0: (5, E.NONE), TP1: (9, E.NONE)}
    assert fetched(h, tps=[TP0, ("t", 2)]) == {TP0: (5, E.NONE), ("t", 2): (None, E.NONE)}
    assert fetched(h, group="other") == {}
    # the group exists (Empty, no protocol) and is listed
    assert [(g.group_id, g.state) for g in h.coord.list_groups()] == [("g", "Empty")]


def test_commit_is_acknowledged_only_after_the_append(h):
    h.topic.fail_appends = OSError("disk full")
    top, errors = commit(h, {TP0: 5})
    assert errors[TP0] is E.NOT_COORDINATOR  # Kafka's answer to a storage error: retriable
    h.topic.fail_appends = None
    assert fetched(h) == {}


def test_unknown_partition_and_oversized_metadata_are_per_partition_errors():
    h = Harness()
    h.coord = GroupCoordinator(h.config, h.clock, h.topic, partition_exists=lambda t, p: t == "t" and p < 2)
    h.coord.load()
    entries = {
        TP0: OffsetCommitEntry(1),
        ("t", 5): OffsetCommitEntry(1),
        ("nope", 0): OffsetCommitEntry(1),
        TP1: OffsetCommitEntry(1, metadata="x" * 5000),
    }
    _, errors = h.coord.commit_offsets("g", "", None, -1, entries)
    assert errors == {
        TP0: E.NONE,
        ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        TP1: E.OFFSET_METADATA_TOO_LARGE,
    }


def test_member_commits_are_checked_against_generation(h):
    r = h.stable_single()
    assert commit(h, {TP0: 1}, member=r.member_id, generation=1)[1] == {TP0: E.NONE}
    assert commit(h, {TP0: 2}, member=r.member_id, generation=0)[0] is E.ILLEGAL_GENERATION
    assert commit(h, {TP0: 2}, member="ghost", generation=1)[0] is E.UNKNOWN_MEMBER_ID
    assert commit(h, {TP0: 2}, member="", generation=-1)[0] is E.UNKNOWN_MEMBER_ID  # group is not empty
    b = h.join_new(client_id="b")
    h.join("g", r.member_id)
    assert h.coord.group("g").state is GroupState.COMPLETING_REBALANCE
    assert commit(h, {TP0: 2}, member=r.member_id, generation=2)[0] is E.REBALANCE_IN_PROGRESS
    assert b and fetched(h)[TP0] == (1, E.NONE)


def test_a_commit_with_a_generation_to_an_unknown_group_depends_on_the_version(h):
    """Kafka's group coordinator (OffsetMetadataManager.validateOffsetCommit): from OffsetCommit v9 a
    group that is not there is GROUP_ID_NOT_FOUND; older versions keep ILLEGAL_GENERATION. Either way
    nothing is stored and no group is created."""
    for version in (9, 10):
        assert commit(h, {TP0: 2}, group="fresh", member="x", generation=3, api_version=version) == (
            E.GROUP_ID_NOT_FOUND,
            {},
        )
    for version in (2, 5, 8):
        assert commit(h, {TP0: 2}, group="fresh", member="x", generation=3, api_version=version) == (
            E.ILLEGAL_GENERATION,
            {},
        )
    # generation 0 is a generation too (a member epoch 0 at v9)
    assert commit(h, {TP0: 2}, group="fresh", generation=0, api_version=9)[0] is E.GROUP_ID_NOT_FOUND
    assert commit(h, {TP0: 2}, group="fresh", generation=0, api_version=8)[0] is E.ILLEGAL_GENERATION
    assert h.coord.group("fresh") is None and h.coord.list_groups() == []
    assert fetched(h, group="fresh") == {}


@pytest.mark.parametrize("version", [2, 8, 9])
@pytest.mark.parametrize("member", ["", "someone"])
def test_a_commit_without_a_generation_creates_a_simple_group(h, version, member):
    """Generation -1 (admin tools, consumers that assign themselves) creates an empty classic group
    at every version, whatever member id the request names: Kafka decides on the generation alone."""
    assert commit(h, {TP0: 4}, group="simple", member=member, api_version=version) == (
        E.NONE,
        {TP0: E.NONE},
    )
    assert h.coord.group("simple").state is GroupState.EMPTY
    assert fetched(h, group="simple") == {TP0: (4, E.NONE)}


def test_static_member_fencing_on_commit(h):
    s = h.join("g", instance_id="i")
    h.sync("g", s[0].member_id, 1, {s[0].member_id: b""}, instance_id="i")
    assert commit(h, {TP0: 1}, member="old-id", generation=1, instance="i")[0] is E.FENCED_INSTANCE_ID


def test_offsets_and_groups_survive_restart(h):
    r = h.stable_single()
    commit(h, {TP0: 11}, member=r.member_id, generation=1)
    commit(h, {TP0: 3}, group="simple")
    coord = h.restart()
    assert fetched(h) == {TP0: (11, E.NONE)}
    assert fetched(h, group="simple") == {TP0: (3, E.NONE)}
    g = coord.group("g")
    assert g.state is GroupState.STABLE and g.generation_id == 1 and list(g.members) == [r.member_id]
    assert g.members[r.member_id].assignment == b"A"
    # the member comes back and keeps its generation
    assert coord.heartbeat("g", r.member_id, None, 1) is E.NONE
    # a member that never comes back expires
    h.clock.advance(SESSION_MS * 2)
    assert coord.group("g").state is GroupState.EMPTY


def test_records_use_kafka_schemas_on_the_groups_partition(h):
    h.stable_single()
    commit(h, {TP0: 11}, group="g", member=h.coord.group("g").leader_id, generation=1)
    part = fmt.partition_for_group("g", 3)
    keys = [fmt.decode_key(k) for b in h.topic.batches[part] for k, _ in b.records]
    assert fmt.GroupKey("g") in keys and fmt.OffsetKey("g", "t", 0) in keys


def test_loading_coordinator_refuses(h):
    coord = GroupCoordinator(h.config, h.clock, h.topic)
    with pytest.raises(CoordinatorLoadInProgress):
        coord.fetch_offsets("g", None)
    assert coord.heartbeat("g", "m", None, 1) is E.COORDINATOR_LOAD_IN_PROGRESS
    out = []
    coord.sync_group("g", "m", None, 1, {}, out.append)
    assert out[0].error is E.COORDINATOR_LOAD_IN_PROGRESS


def test_offsets_of_an_empty_group_expire_after_retention(h):
    r = h.stable_single()
    commit(h, {TP0: 4}, member=r.member_id, generation=1)
    commit(h, {TP0: 8}, group="simple")
    h.coord.leave_group("g", [(r.member_id, None)])
    retention = h.config.offsets_retention_ms
    h.clock.advance(retention - 1)
    assert h.coord.expire_offsets() == 0
    h.clock.advance(1)
    assert h.coord.expire_offsets() == 2
    assert h.coord.group("g") is None and h.coord.group("simple") is None
    h.restart()
    assert fetched(h) == {} and h.coord.group("g") is None


def test_periodic_expiry_timer_runs(h):
    commit(h, {TP0: 8}, group="simple")
    h.coord.start_expiry()
    h.clock.advance(h.config.offsets_retention_ms + h.config.offsets_retention_check_interval_ms)
    assert fetched(h, group="simple") == {}


def test_stable_group_offsets_do_not_expire(h):
    r = h.stable_single()
    commit(h, {TP0: 4}, member=r.member_id, generation=1)
    for _ in range(3):
        h.clock.advance(SESSION_MS // 2)
        h.coord.heartbeat("g", r.member_id, None, 1)
    assert h.coord.expire_offsets() == 0


def _subscription(*topics):
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    return bytes(
        ConsumerProtocolSubscription(
            topics=list(topics), user_data=b"", owned_partitions=[], version=1
        ).encode()
    )


def _keep_alive(h, r, ms):
    """Advance the clock by ``ms`` while the member heartbeats, so the group stays Stable."""
    step = SESSION_MS // 2
    for _ in range(ms // step):
        h.clock.advance(step)
        assert h.coord.heartbeat("g", r.member_id, None, r.generation_id) is E.NONE
    h.clock.advance(ms % step)
    assert h.coord.heartbeat("g", r.member_id, None, r.generation_id) is E.NONE


def test_stable_group_keeps_subscribed_offsets_and_expires_the_others():
    """KIP-496: a Stable consumer group's offsets of topics nobody subscribes to any more expire
    retention after their commit; the subscribed topic's never do while the group lives."""
    h = Harness(offsets_retention_minutes=1)
    r = h.stable_single(protocols=(("range", _subscription("t")),))
    commit(h, {TP0: 4, ("old", 0): 2}, member=r.member_id, generation=r.generation_id)
    retention = h.config.offsets_retention_ms
    _keep_alive(h, r, retention - 1)
    assert h.coord.expire_offsets() == 0
    _keep_alive(h, r, 1)
    assert h.coord.expire_offsets() == 1
    assert fetched(h) == {TP0: (4, E.NONE)}
    assert h.coord.group("g").state.kafka_name == "Stable"
    _keep_alive(h, r, 3 * retention)
    assert h.coord.expire_offsets() == 0
    h.restart()  # the tombstone is in __consumer_offsets: the expired offset stays gone
    assert fetched(h) == {TP0: (4, E.NONE)}


def test_stable_group_with_an_unreadable_subscription_expires_nothing():
    h = Harness(offsets_retention_minutes=1)
    r = h.stable_single(protocols=(("range", b"not a subscription"),))
    commit(h, {("old", 0): 2}, member=r.member_id, generation=r.generation_id)
    _keep_alive(h, r, 2 * h.config.offsets_retention_ms)
    assert h.coord.expire_offsets() == 0
    assert fetched(h) == {("old", 0): (2, E.NONE)}


def test_delete_groups(h):
    r = h.stable_single()
    commit(h, {TP0: 4}, member=r.member_id, generation=1)
    commit(h, {TP0: 1}, group="simple")
    assert h.coord.delete_groups(["g", "simple", "missing"]) == {
        "g": E.NON_EMPTY_GROUP,
        "simple": E.NONE,
        "missing": E.GROUP_ID_NOT_FOUND,
    }
    assert fetched(h, group="simple") == {}
    h.restart()
    assert h.coord.group("simple") is None and fetched(h, group="simple") == {}


def test_offset_delete_refuses_subscribed_topics(h):
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    sub = bytes(
        ConsumerProtocolSubscription(topics=["t"], user_data=b"", owned_partitions=[], version=1).encode()
    )
    r = h.stable_single(protocols=(("range", sub),))
    commit(h, {TP0: 4, ("u", 0): 2}, member=r.member_id, generation=1)
    top, errors = h.coord.delete_offsets("g", [TP0, ("u", 0)])
    assert top is E.NONE and errors == {TP0: E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE}
    assert fetched(h) == {TP0: (4, E.NONE)}
    assert h.coord.delete_offsets("nope", [TP0])[0] is E.GROUP_ID_NOT_FOUND


def test_transactional_offsets_stay_pending_until_the_commit_marker(h):
    commit(h, {TP0: 1})
    results = h.coord.commit_txn_offsets("g", 42, 0, {TP0: OffsetCommitEntry(10)})
    assert results == {TP0: E.NONE}
    assert fetched(h) == {TP0: (1, E.NONE)}
    assert fetched(h, require_stable=True) == {TP0: (None, E.UNSTABLE_OFFSET_COMMIT)}
    # replay before the marker: still pending
    part = fmt.partition_for_group("g", 3)
    h.restart()
    assert fetched(h, require_stable=True)[TP0][1] is E.UNSTABLE_OFFSET_COMMIT
    h.topic.write_marker(part, 42, 0, commit=True)
    h.coord.on_txn_marker(42, commit=True)
    assert fetched(h, require_stable=True) == {TP0: (10, E.NONE)}
    h.restart()
    assert fetched(h) == {TP0: (10, E.NONE)}


def test_aborted_transactional_offsets_never_show(h):
    h.coord.commit_txn_offsets("g", 7, 0, {TP0: OffsetCommitEntry(10)})
    h.topic.write_marker(fmt.partition_for_group("g", 3), 7, 0, commit=False)
    h.coord.on_txn_marker(7, commit=False)
    assert fetched(h, tps=[TP0]) == {TP0: (None, E.NONE)}
    h.restart()
    assert fetched(h, tps=[TP0], require_stable=True) == {TP0: (None, E.NONE)}


def test_describe_and_list(h):
    r = h.stable_single()
    d = h.coord.describe_group("g")
    assert (d.error, d.state, d.protocol_type, d.protocol) == (E.NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.assignment, m.metadata) for m in d.members] == [(r.member_id, b"A", b"r-meta")]
    assert h.coord.describe_group("missing").error is E.GROUP_ID_NOT_FOUND
    assert [g.group_id for g in h.coord.list_groups(states=["stable"])] == ["g"]
    assert h.coord.list_groups(states=["Empty"]) == []
    assert h.coord.list_groups(types=["consumer"]) == []  # KIP-848 type filter: these groups are classic


def test_txn_offset_commit_member_checks_allow_a_rebalance_in_progress(h):
    """KIP-447 (Kafka's validateOffsetCommit with isTransactional): TxnOffsetCommit checks member,
    instance and generation only; a member of the new generation may commit while the group is
    CompletingRebalance, where a plain OffsetCommit gets REBALANCE_IN_PROGRESS."""
    r = h.stable_single()
    check = h.coord.check_txn_member
    assert check("g", r.member_id, None, 1) is E.NONE
    assert check("g", r.member_id, None, 0) is E.ILLEGAL_GENERATION
    assert check("g", "ghost", None, 1) is E.UNKNOWN_MEMBER_ID
    assert check("g", "", None, -1) is E.NONE  # v0-2 or group id only: no member data to check
    assert check("fresh", "", None, -1) is E.NONE
    assert check("fresh", "x", None, -1) is E.NONE  # no generation: the commit creates the group
    # A generation for a group that is not there: ILLEGAL_GENERATION at every TxnOffsetCommit version
    # (Kafka's validateTransactionalOffsetCommit; no GROUP_ID_NOT_FOUND as OffsetCommit v9 has).
    assert check("fresh", "x", None, 3) is E.ILLEGAL_GENERATION
    assert check("fresh", "", None, 0) is E.ILLEGAL_GENERATION
    assert h.coord.group("fresh") is None
    h.join_new(client_id="b")
    h.join("g", r.member_id)
    group = h.coord.group("g")
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation_id == 2
    assert commit(h, {TP0: 2}, member=r.member_id, generation=2)[0] is E.REBALANCE_IN_PROGRESS
    assert check("g", r.member_id, None, 2) is E.NONE
    assert check("g", r.member_id, None, 1) is E.ILLEGAL_GENERATION  # the zombie of generation 1


def test_txn_offset_commit_fences_a_replaced_static_member(h):
    s = h.join("g", instance_id="i")
    h.sync("g", s[0].member_id, 1, {s[0].member_id: b""}, instance_id="i")
    assert h.coord.check_txn_member("g", s[0].member_id, "i", 1) is E.NONE
    assert h.coord.check_txn_member("g", "old-id", "i", 1) is E.FENCED_INSTANCE_ID
