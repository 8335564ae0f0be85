"""The consumer group protocol (KIP-848) without sockets: assignors, the reconciliation rules, and
ConsumerGroupHeartbeat's epochs, errors and timers on a manual clock."""

from __future__ import annotations

import uuid

import pytest

from onceflow.broker.coordinator.scheduler import ManualScheduler
from onceflow.broker.group import assignment as a
from onceflow.broker.group.consumer_group import ConsumerGroupConfig, ConsumerGroupState, HeartbeatRequest
from onceflow.broker.group.consumer_groups import ConsumerGroups
from onceflow.broker.group.reconciliation import MemberAssignment, MemberState, next_assignment
from onceflow.protocol.errors import ErrorCode, KafkaError

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def parts(result) -> set[tuple[uuid.UUID, int]]:
    return a.pairs(result) if result else set()


# -- assignors ------------------------------------------------------------------------------------


def test_uniform_spreads_evenly_and_keeps_what_it_can():
    subs = {m: frozenset({T1}) for m in ("a", "b", "c")}
    first = a.uniform(subs, {T1: 7}, {})
    sizes = sorted(len(parts(x)) for x in first.values())
    assert sizes == [2, 2, 3]
    assert set().union(*(parts(x) for x in first.values())) == {(T1, p) for p in range(7)}
    # A fourth member: only what it needs moves to it; nobody else trades partitions.
    subs["d"] = frozenset({T1})
    second = a.uniform(subs, {T1: 7}, first)
    assert sorted(len(parts(x)) for x in second.values()) == [1, 2, 2, 2]
    for member in ("a", "b", "c"):
        assert parts(second[member]) <= parts(first[member])


def test_uniform_with_different_subscriptions_gives_each_topic_only_to_its_subscribers():
    subs = {"a": frozenset({T1}), "b": frozenset({T1, T2}), "c": frozenset({T2})}
    result = a.uniform(subs, {T1: 4, T2: 4}, {})
    assert {t for t, _ in parts(result["a"])} == {T1}
    assert {t for t, _ in parts(result["c"])} == {T2}
    assert sum(len(parts(x)) for x in result.values()) == 8
    assert max(len(parts(x)) for x in result.values()) - min(len(parts(x)) for x in result.values()) <= 1


def test_uniform_drops_partitions_of_topics_no_longer_subscribed_or_gone():
    previous = {"a": {T1: frozenset({0, 1}), T2: frozenset({0})}}
    result = a.uniform({"a": frozenset({T1})}, {T1: 1}, previous)
    assert result["a"] == {T1: frozenset({0})}


def test_range_gives_contiguous_ranges_in_member_order():
    subs = {"b": frozenset({T1, T2}), "a": frozenset({T1, T2})}
    result = a.range_assign(subs, {T1: 5, T2: 5}, {})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}


# -- reconciliation -------------------------------------------------------------------------------


def owned_by(owners: dict):
    return lambda topic, partition: (topic, partition) in owners


def test_a_member_revokes_before_its_epoch_moves_on():
    current = MemberAssignment(MemberState.STABLE, 1, 0, {T1: frozenset({0, 1})})
    target = {T1: frozenset({0})}
    step = next_assignment(current, 2, target, None, owned_by({}))
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.epoch == 1 and step.assigned == target and step.pending_revocation == {T1: frozenset({1})}
    # A heartbeat that does not say what it owns, or still owns partition 1, changes nothing.
    assert next_assignment(step, 2, target, None, owned_by({})) == step
    assert next_assignment(step, 2, target, {T1: frozenset({0, 1})}, owned_by({})) == step
    done = next_assignment(step, 2, target, {T1: frozenset({0})}, owned_by({}))
    assert (done.state, done.epoch, done.previous_epoch) == (MemberState.STABLE, 2, 1)
    assert done.pending_revocation == {}


def test_partitions_another_member_still_holds_are_held_back():
    current = MemberAssignment(MemberState.STABLE, 1, 0, {})
    target = {T1: frozenset({0, 1})}
    step = next_assignment(current, 2, target, {}, owned_by({(T1, 1): "other"}))
    assert (step.state, step.epoch, step.assigned) == (
        MemberState.UNRELEASED_PARTITIONS,
        2,
        {T1: frozenset({0})},
    )
    freed = next_assignment(step, 2, target, None, owned_by({}))
    assert (freed.state, freed.assigned) == (MemberState.STABLE, target)


# -- ConsumerGroupHeartbeat -----------------------------------------------------------------------


class FakeTopics:
    def __init__(self, **partition_counts: int) -> None:
        self.counts = dict(partition_counts)
        self.ids = {name: uuid.uuid5(uuid.NAMESPACE_OID, name) for name in partition_counts}

    def add(self, name: str, partitions: int) -> None:
        self.counts[name] = partitions
        self.ids[name] = uuid.uuid5(uuid.NAMESPACE_OID, name)

    def topic(self, name: str):
        return (self.ids[name], self.counts[name]) if name in self.counts else None

    def topic_names(self):
        return list(self.counts)


class Harness:
    def __init__(self, **topics: int) -> None:
        self.clock = ManualScheduler()
        self.topics = FakeTopics(**topics)
        self.config = ConsumerGroupConfig(heartbeat_interval_ms=1000, session_timeout_ms=10_000)
        self.groups = ConsumerGroups(self.config, self.clock, self.topics)

    def id(self, topic: str) -> uuid.UUID:
        return self.topics.ids[topic]

    def join(self, member: str, topics=("t",), **kw):
        return self.groups.heartbeat(
            HeartbeatRequest(
                "g",
                member,
                0,
                rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 5000),
                subscribed_topic_names=tuple(topics) if topics is not None else None,
                owned={},
                **kw,
            )
        )

    def beat(self, member: str, epoch: int, owned=None, **kw):
        return self.groups.heartbeat(HeartbeatRequest("g", member, epoch, owned=owned, **kw))

    def group(self):
        return self.groups.get("g")


def error_of(call) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


def test_first_member_gets_every_partition_at_epoch_one():
    h = Harness(t=3)
    result = h.join("m1")
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("m1", 1, 1000)
    assert result.assignment == {h.id("t"): frozenset({0, 1, 2})}
    assert h.group().state is ConsumerGroupState.STABLE
    # Nothing changed: no assignment in the answer.
    assert h.beat("m1", 1).assignment is None


def test_a_second_member_gets_partitions_only_after_the_first_revokes_them():
    h = Harness(t=4)
    h.join("m1")
    second = h.join("m2")
    # m1 still holds everything: m2 is at the new epoch with nothing yet.
    assert second.member_epoch == 2 and second.assignment == {}
    assert h.group().state is ConsumerGroupState.RECONCILING
    revoke = h.beat("m1", 1)
    assert revoke.member_epoch == 1  # it keeps its epoch until it has let go
    kept = revoke.assignment
    assert len(a.pairs(kept)) == 2
    assert h.beat("m2", 2).assignment is None  # still nothing free for m2
    done = h.beat("m1", 1, owned=kept)
    assert done.member_epoch == 2 and done.assignment == kept
    gained = h.beat("m2", 2).assignment
    assert a.pairs(gained) == a.pairs({h.id("t"): frozenset(range(4))}) - a.pairs(kept)
    assert h.group().state is ConsumerGroupState.STABLE


def test_epoch_rules():
    h = Harness(t=2)
    h.join("m1")
    h.join("m2")
    kept = h.beat("m1", 1).assignment
    h.beat("m1", 1, owned=kept)  # now at epoch 2; its previous epoch is 1
    assert error_of(lambda: h.beat("m1", 3)) is ErrorCode.FENCED_MEMBER_EPOCH
    # The answer that moved it to epoch 2 was lost: epoch 1 with a subset of its partitions is accepted.
    assert h.beat("m1", 1, owned=kept).member_epoch == 2
    assert error_of(lambda: h.beat("m1", 1)) is ErrorCode.FENCED_MEMBER_EPOCH  # owned not given
    assert error_of(lambda: h.beat("nobody", 2)) is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    "request_kw, code",
    [
        ({"group_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"member_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
        ({"owned": None}, ErrorCode.INVALID_REQUEST),
        ({"subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
        ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"subscribed_topic_regex": "t("}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        # RE2/J syntax, as Kafka: no lookaround or backreferences (Python's re would accept these).
        ({"subscribed_topic_regex": "(?!internal).*"}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        ({"subscribed_topic_regex": r"(t)\1"}, ErrorCode.INVALID_REGULAR_EXPRESSION),
    ],
)
def test_bad_join_requests(request_kw, code):
    h = Harness(t=1)
    fields = {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 0,
        "rebalance_timeout_ms": 5000,
        "subscribed_topic_names": ("t",),
        "owned": {},
        **request_kw,
    }
    assert error_of(lambda: h.groups.heartbeat(HeartbeatRequest(**fields))) is code


def test_v0_join_gets_a_member_id_from_the_coordinator():
    h = Harness(t=1)
    result = h.groups.heartbeat(
        HeartbeatRequest(
            "g", "", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned={}, api_version=0
        )
    )
    assert result.member_id and result.member_epoch == 1


def test_leaving_frees_the_partitions_for_the_others():
    h = Harness(t=2)
    h.join("m1")
    h.join("m2")
    assert h.beat("m1", -1).member_epoch == -1
    assert "m1" not in h.group().members
    result = h.beat("m2", 2)
    assert result.member_epoch == 3 and result.assignment == {h.id("t"): frozenset({0, 1})}


def test_a_silent_member_is_removed_after_its_session_timeout():
    h = Harness(t=2)
    h.join("m1")
    h.join("m2")
    epoch = 2
    for _ in range(3):  # m2 heartbeats every 4 s; m1 never again
        h.clock.advance(4000)
        result = h.beat("m2", epoch)
        epoch = result.member_epoch
    assert "m1" not in h.group().members
    assert epoch == 3 and result.assignment == {h.id("t"): frozenset({0, 1})}


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced():
    h = Harness(t=2)
    h.join("m1", rebalance_timeout_ms=3000)
    h.join("m2")
    h.beat("m1", 1)  # told to revoke; never confirms
    h.clock.advance(2000)
    h.beat("m2", 2)
    assert "m1" in h.group().members
    h.clock.advance(1500)
    assert "m1" not in h.group().members
    assert error_of(lambda: h.beat("m1", 1)) is ErrorCode.UNKNOWN_MEMBER_ID


def test_new_partitions_and_new_topics_of_a_regex_bump_the_group_epoch():
    h = Harness(**{"orders-a": 1, "other": 1})
    first = h.join("m1", topics=None, subscribed_topic_regex="orders-.*")
    assert first.assignment == {h.id("orders-a"): frozenset({0})}
    h.topics.add("orders-b", 2)
    h.topics.counts["orders-a"] = 2
    after = h.beat("m1", 1)
    assert after.member_epoch == 2
    assert a.pairs(after.assignment) == {(h.id("orders-a"), 0), (h.id("orders-a"), 1)} | {
        (h.id("orders-b"), p) for p in (0, 1)
    }


def test_a_regex_that_backtracks_exponentially_is_matched_in_linear_time():
    """``(a+)+b`` against a name of 60 a's: a backtracking matcher tries ~2^60 ways and the broker's
    one event loop would never answer this heartbeat (or any other); RE2 answers at once."""
    h = Harness(**{"a" * 60: 1, "aab": 1})
    result = h.join("m1", topics=None, subscribed_topic_regex="(a+)+b")
    assert result.assignment == {h.id("aab"): frozenset({0})}


def test_a_static_member_keeps_its_partitions_across_a_restart():
    h = Harness(t=2)
    h.join("m1", instance_id="i1")
    h.join("m2", instance_id="i2")
    h.beat("m1", 1, owned=h.beat("m1", 1, instance_id="i1").assignment, instance_id="i1")
    h.beat("m2", 2)
    before = h.group().members["m1"].assignment
    assert h.beat("m1", -2, instance_id="i1").member_epoch == -2  # temporary leave
    # Its instance id is still taken by the departed member until it rejoins or times out...
    assert error_of(lambda: h.join("m3", instance_id="i2")) is ErrorCode.UNRELEASED_INSTANCE_ID
    # ...and the restarted process, under a new member id, picks up where it left off.
    back = h.join("m1-new", instance_id="i1")
    assert back.member_epoch == before.epoch and back.assignment == before.assigned
    assert "m1" not in h.group().members


def test_offset_checks_for_consumer_protocol_members():
    h = Harness(t=1)
    h.join("m1")
    group = h.group()
    check = h.groups.check_offset_commit
    assert check(group, "m1", None, 1, transactional=False) is ErrorCode.NONE
    assert check(group, "m1", None, 0, transactional=False) is ErrorCode.STALE_MEMBER_EPOCH
    assert check(group, "m1", None, 0, transactional=True) is ErrorCode.ILLEGAL_GENERATION
    assert check(group, "ghost", None, 1, transactional=False) is ErrorCode.UNKNOWN_MEMBER_ID
    assert check(group, "", None, -1, transactional=False) is ErrorCode.UNKNOWN_MEMBER_ID  # group not empty
    # TxnOffsetCommit may name no member at all.
    assert check(group, "", None, -1, transactional=True) is ErrorCode.NONE
    assert h.groups.check_offset_fetch(group, None, -1) is ErrorCode.NONE
    assert h.groups.check_offset_fetch(group, "m1", 0) is ErrorCode.STALE_MEMBER_EPOCH
    h.beat("m1", -1)
    assert check(group, "", None, -1, transactional=False) is ErrorCode.NONE  # empty group: admin commits


def test_offset_commit_below_v9_from_a_member_is_unsupported_version():
    """Kafka's rule: a member of a consumer-protocol group commits with OffsetCommit v9+, the first
    version with a member epoch. Unknown members are found out first; TxnOffsetCommit has no such
    rule; a commit naming no member still works on an empty group, at any version."""
    h = Harness(t=1)
    h.join("m1")
    group = h.group()
    check = h.groups.check_offset_commit
    assert check(group, "m1", None, 1, transactional=False, api_version=8) is ErrorCode.UNSUPPORTED_VERSION
    # The version is checked before the epoch: a stale v8 commit is refused for its version too.
    assert check(group, "m1", None, 0, transactional=False, api_version=2) is ErrorCode.UNSUPPORTED_VERSION
    assert check(group, "ghost", None, 1, transactional=False, api_version=8) is ErrorCode.UNKNOWN_MEMBER_ID
    assert check(group, "", None, -1, transactional=False, api_version=8) is ErrorCode.UNKNOWN_MEMBER_ID
    assert check(group, "m1", None, 1, transactional=False, api_version=9) is ErrorCode.NONE
    # TxnOffsetCommit: no version rule (v3+ carries the generation, which is the member epoch here).
    assert check(group, "m1", None, 1, transactional=True, api_version=3) is ErrorCode.NONE
    # Only generation -1 means "no member" to TxnOffsetCommit; any other names a member (Kafka's test).
    assert check(group, "", None, -2, transactional=True) is ErrorCode.UNKNOWN_MEMBER_ID
    h.beat("m1", -1)
    assert check(group, "", None, -1, transactional=False, api_version=2) is ErrorCode.NONE


def test_a_new_subscription_revokes_the_old_topic_first():
    h = Harness(t=1, u=2)
    h.join("m1")
    change = h.beat("m1", 1, subscribed_topic_names=("u",))
    assert change.member_epoch == 1 and change.assignment == {}  # give up t before anything else
    moved = h.beat("m1", 1, owned={})
    assert moved.member_epoch == 2 and moved.assignment == {h.id("u"): frozenset({0, 1})}


def test_a_deleted_topic_is_taken_away():
    h = Harness(t=1, u=1)
    h.join("m1", topics=("t", "u"))
    del h.topics.counts["u"]
    result = h.beat("m1", 1)
    assert result.assignment == {h.id("t"): frozenset({0})}  # revoked: u's partition no longer exists
    assert h.beat("m1", 1, owned=result.assignment).member_epoch == 2


def test_the_members_assignor_decides_the_target():
    h = Harness(t=4)
    h.join("b", server_assignor="range")
    h.join("a", server_assignor="range")
    assert h.group().target["a"] == {h.id("t"): frozenset({0, 1})}
    assert h.group().target["b"] == {h.id("t"): frozenset({2, 3})}


def coordinator_with_topic(**config):
    from onceflow.broker.group.config import GroupCoordinatorConfig
    from onceflow.broker.group.coordinator import GroupCoordinator
    from onceflow.broker.group.persistence import InMemoryOffsetsTopic

    topics = FakeTopics(t=2, u=1)
    clock = ManualScheduler()
    coord = GroupCoordinator(
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, **config),
        clock,
        InMemoryOffsetsTopic(num_partitions=3),
        topic_lookup=topics,
    )
    coord.load()
    return coord, clock


def join_request(member: str, group: str = "g") -> HeartbeatRequest:
    return HeartbeatRequest(
        group, member, 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned={}
    )


def test_the_coordinator_keeps_classic_and_consumer_groups_apart():
    from onceflow.broker.group.coordinator import OffsetCommitEntry
    from onceflow.broker.group.requests import JoinRequest

    coord, clock = coordinator_with_topic()
    coord.consumer_group_heartbeat(join_request("m1"))
    answers = []
    classic_join = JoinRequest(
        group_id="g",
        member_id="",
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", b"")],
        require_known_member_id=False,
    )
    coord.join_group(classic_join, answers.append)
    assert answers[0].error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    listed = coord.list_groups(types=["consumer"])
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [("g", "consumer", "Stable")]
    assert coord.list_groups(types=["classic"]) == []
    # Offsets: the member commits at its epoch; a stale epoch is refused.
    offsets = {("t", 0): OffsetCommitEntry(5)}
    assert coord.commit_offsets("g", "m1", None, 1, offsets)[1] == {("t", 0): ErrorCode.NONE}
    assert coord.commit_offsets("g", "m1", None, 0, offsets)[0] is ErrorCode.STALE_MEMBER_EPOCH
    assert coord.check_txn_member("g", "m1", None, 0) is ErrorCode.ILLEGAL_GENERATION
    assert coord.delete_groups(["g"]) == {"g": ErrorCode.NON_EMPTY_GROUP}
    coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", -1))
    assert coord.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    assert coord.fetch_offsets("g", None)[1] == []
    # The id is free again, for either protocol.
    coord.join_group(classic_join, answers.append)
    clock.advance(1)  # the new group's (zero) initial rebalance delay
    assert len(answers) == 2 and answers[-1].error is ErrorCode.NONE
    with pytest.raises(KafkaError) as info:
        coord.consumer_group_heartbeat(join_request("m2"))
    assert info.value.code is ErrorCode.GROUP_ID_NOT_FOUND


def test_the_coordinator_refuses_a_members_commit_below_v9_and_stores_nothing():
    from onceflow.broker.group.coordinator import OffsetCommitEntry

    coord, _ = coordinator_with_topic()
    coord.consumer_group_heartbeat(join_request("m1"))
    offsets = {("t", 0): OffsetCommitEntry(5)}
    assert coord.commit_offsets("g", "m1", None, 1, offsets, api_version=8) == (
        ErrorCode.UNSUPPORTED_VERSION,
        {},
    )
    assert coord.fetch_offsets("g", None)[1] == []
    assert coord.commit_offsets("g", "m1", None, 1, offsets, api_version=9)[1] == {("t", 0): ErrorCode.NONE}
    # OffsetFetch below v9 names no member: accepted, as Kafka's validateOffsetFetch has no version rule.
    error, rows = coord.fetch_offsets("g", [("t", 0)])
    assert error is ErrorCode.NONE and rows[0][1].offset == 5
    assert coord.check_txn_member("g", "m1", None, 1) is ErrorCode.NONE


def test_a_commit_at_a_member_epoch_to_a_group_that_is_gone_is_group_id_not_found_from_v9():
    """Kafka's group coordinator: a group that does not exist answers a commit carrying an epoch
    GROUP_ID_NOT_FOUND from OffsetCommit v9 (the error both protocols' clients understand there),
    ILLEGAL_GENERATION below v9 and for TxnOffsetCommit; without an epoch the commit recreates the
    group, as a classic one."""
    from onceflow.broker.group.coordinator import OffsetCommitEntry

    coord, _ = coordinator_with_topic()
    coord.consumer_group_heartbeat(join_request("m1"))
    coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", -1))
    assert coord.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    offsets = {("t", 0): OffsetCommitEntry(5)}
    assert coord.commit_offsets("g", "m1", None, 1, offsets, api_version=9) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        {},
    )
    assert coord.commit_offsets("g", "m1", None, 1, offsets, api_version=8) == (
        ErrorCode.ILLEGAL_GENERATION,
        {},
    )
    assert coord.check_txn_member("g", "m1", None, 1) is ErrorCode.ILLEGAL_GENERATION
    assert coord.list_groups() == [] and coord.fetch_offsets("g", None)[1] == []
    assert coord.commit_offsets("g", "", None, -1, offsets, api_version=9)[1] == {("t", 0): ErrorCode.NONE}
    assert [(g.group_id, g.group_type, g.state) for g in coord.list_groups()] == [("g", "classic", "Empty")]


def test_offsets_of_a_consumer_group_expire_by_commit_time_unless_subscribed():
    """Kafka's rule for consumer-protocol groups: an offset of a topic no member subscribes to expires
    offsets.retention after its commit; an empty group with no offsets left is deleted."""
    from onceflow.broker.group.coordinator import OffsetCommitEntry

    coord, clock = coordinator_with_topic(offsets_retention_minutes=1)
    coord.consumer_group_heartbeat(join_request("m1"))  # subscribed to t only
    offsets = {("t", 0): OffsetCommitEntry(5), ("u", 0): OffsetCommitEntry(7)}
    assert coord.commit_offsets("g", "m1", None, 1, offsets)[0] is ErrorCode.NONE
    for _ in range(2):  # 61 s, heartbeating within the 45 s session timeout
        clock.advance(30_500)
        coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", 1))
    assert coord.expire_offsets() == 1  # u's offset: nobody subscribes to u
    assert [tp for tp, _, _ in coord.fetch_offsets("g", None)[1]] == [("t", 0)]
    coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", -1))
    assert coord.expire_offsets() == 1  # empty now: t's offset is past retention too
    assert coord.consumer_groups.get("g") is None


def test_consumer_groups_survive_a_coordinator_restart():
    """The group's records in __consumer_offsets (Kafka's types 3, 5, 6, 7, 8) bring back epochs,
    subscriptions, target and current assignments: members carry on without rejoining."""
    from onceflow.broker.group.config import GroupCoordinatorConfig
    from onceflow.broker.group.coordinator import GroupCoordinator
    from onceflow.broker.group.persistence import InMemoryOffsetsTopic

    topics = FakeTopics(t=2)
    clock = ManualScheduler()
    log = InMemoryOffsetsTopic(num_partitions=3)

    def start() -> GroupCoordinator:
        coord = GroupCoordinator(GroupCoordinatorConfig(), clock, log, topic_lookup=topics)
        coord.load()
        return coord

    coord = start()
    coord.consumer_group_heartbeat(join_request("m1"))
    coord.consumer_group_heartbeat(join_request("m2", group="g"))
    revoke = coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", 1))
    assert revoke.member_epoch == 1  # m1 must give up a partition: it waits in UNREVOKED_PARTITIONS
    before = coord.consumer_group("g")
    snapshot = {m.member_id: m.assignment for m in before.members.values()}
    coord.shutdown()

    coord = start()
    after = coord.consumer_group("g")
    assert (after.epoch, after.target_epoch) == (before.epoch, before.target_epoch)
    assert {m.member_id: m.assignment for m in after.members.values()} == snapshot
    assert after.target == before.target
    # m1 finishes its revocation across the restart; m2 then gets the partition.
    done = coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", 1, owned=revoke.assignment))
    assert done.member_epoch == 2
    gained = coord.consumer_group_heartbeat(HeartbeatRequest("g", "m2", 2))
    assert a.pairs(gained.assignment) | a.pairs(done.assignment) == {
        (topics.ids["t"], 0),
        (topics.ids["t"], 1),
    }
    # A member that leaves is tombstoned: it is gone after another restart, and so is a deleted group.
    coord.consumer_group_heartbeat(HeartbeatRequest("g", "m2", -1))
    coord.shutdown()
    coord = start()
    assert set(coord.consumer_group("g").members) == {"m1"}
    coord.consumer_group_heartbeat(
        HeartbeatRequest("g", "m1", coord.consumer_group("g").members["m1"].assignment.epoch)
    )
    coord.consumer_group_heartbeat(HeartbeatRequest("g", "m1", -1))
    assert coord.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    coord.shutdown()
    coord = start()
    assert coord.consumer_groups.get("g") is None
