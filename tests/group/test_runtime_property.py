"""The group coordinator on the coordinator runtime, under random operations and failing appends.

After every operation (including those whose append failed) the coordinator's state must be exactly
what replaying its ``__consumer_offsets`` gives (memory never runs ahead of the log), and what clients
were told must be in it; then a crash that keeps any prefix of each partition's batches must bring
back exactly the state of that moment. Classic groups are compared when settled (Empty or Stable):
between those records their membership lives in memory only, as in Kafka.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.broker.coordinator.scheduler import ManualScheduler
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_group import ConsumerGroupConfig, HeartbeatRequest
from onceflow.broker.group.coordinator import GroupCoordinator, OffsetCommitEntry
from onceflow.broker.group.persistence import InMemoryOffsetsTopic
from onceflow.broker.group.requests import JoinRequest
from onceflow.broker.group.state import GroupState
from onceflow.protocol.errors import ErrorCode, KafkaError

PARTITIONS = 3
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_OID, "t")


class Topics:
    def topic(self, name):
        return (TOPIC_ID, 4) if name == "t" else None

    def topic_names(self):
        return ["t"]


CONFIG = GroupCoordinatorConfig(
    group_initial_rebalance_delay_ms=0,
    consumer=ConsumerGroupConfig(heartbeat_interval_ms=1000, session_timeout_ms=10_000),
    offsets_retention_minutes=1,
    offsets_retention_check_interval_ms=20_000,
)


def new_coordinator(clock, log) -> GroupCoordinator:
    coord = GroupCoordinator(CONFIG, clock, log, topic_lookup=Topics())
    coord.load()
    coord.start_expiry()
    return coord


def view(coord: GroupCoordinator, partition: int) -> dict:
    """Everything of ``partition`` that its records decide."""
    mine = lambda gid: coord.partition_for(gid) == partition  # noqa: E731
    offsets = coord.offsets
    committed = {
        (g, tp): (v.offset, v.metadata)
        for g in offsets.group_ids()
        if mine(g)
        for tp, v in offsets.all_for(g).items()
    }
    pending = {
        (pid, g, tp): v.offset
        for pid, groups in offsets.pending_offsets().items()
        for g, tps in groups.items()
        if mine(g)
        for tp, v in tps.items()
    }
    consumer = {
        g.group_id: (
            g.epoch,
            g.target_epoch,
            {m.member_id: (m.assignment, m.subscribed_topic_names) for m in g.members.values()},
            dict(g.target),
        )
        for g in coord.consumer_groups.all()
        if mine(g.group_id)
    }
    classic = {
        gid: (g.generation_id, g.protocol_name, {m.member_id: m.assignment for m in g.members.values()})
        for gid, g in coord.classic_groups.items()
        if mine(gid) and g.is_in(GroupState.STABLE)
    }
    empty = {gid for gid, g in coord.classic_groups.items() if mine(gid) and g.is_in(GroupState.EMPTY)}
    return {
        "committed": committed,
        "pending": pending,
        "consumer": consumer,
        "classic": classic,
        "empty": empty,
    }


def reloaded(log: InMemoryOffsetsTopic, counts: dict[int, int] | None = None) -> GroupCoordinator:
    """A fresh coordinator on a copy of the log, each partition cut to ``counts`` batches."""
    copy = InMemoryOffsetsTopic(PARTITIONS)
    for p in range(PARTITIONS):
        batches = log.batches[p] if counts is None else log.batches[p][: counts[p]]
        for batch in batches:
            copy.append(p, batch)
    return new_coordinator(ManualScheduler(), copy)


def settled_view(coord: GroupCoordinator, partition: int, live: GroupCoordinator) -> dict:
    """``coord``'s view, with only the classic groups that ``live`` has settled (a group rebalancing
    in memory has newer members than its last record, by design)."""
    v = view(coord, partition)
    live_groups = live.classic_groups
    v["classic"] = {
        g: x for g, x in v["classic"].items() if g in live_groups and live_groups[g].is_in(GroupState.STABLE)
    }
    v["empty"] = {g for g in v["empty"] if g in live_groups and live_groups[g].is_in(GroupState.EMPTY)}
    return v


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "commit",
                "txn_commit",
                "marker",
                "join_consumer",
                "beat_consumer",
                "leave_consumer",
                "classic_join_sync",
                "classic_leave",
                "delete_group",
                "advance",
            ]
        ),
        st.integers(0, 2),  # which group / member
        st.integers(0, 99),  # an offset, a producer id, a duration
        st.booleans(),  # the append of this operation fails
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(OPS, st.randoms(use_true_random=False))
def test_memory_is_always_the_log_and_a_crash_keeps_what_was_told(ops, rnd):
    clock = ManualScheduler()
    log = InMemoryOffsetsTopic(PARTITIONS)
    coord = new_coordinator(clock, log)
    told_offsets: dict[tuple[str, tuple[str, int]], int] = {}
    told_members: dict[str, tuple[int, dict]] = {}  # consumer member -> (epoch, assignment) told
    history: dict[int, list[tuple[int, dict]]] = {p: [(0, view(coord, p))] for p in range(PARTITIONS)}
    classic_member: dict[str, str] = {}

    for op, which, number, fail in ops:
        log.fail_appends = OSError("disk gone") if fail else None
        group = f"g{which}"
        if op == "commit":
            top, errors = coord.commit_offsets(group, "", None, -1, {("t", 0): OffsetCommitEntry(number)})
            code = errors.get(("t", 0), top)
            if code is ErrorCode.NONE:
                told_offsets[(group, ("t", 0))] = number
            else:
                assert fail or top is not ErrorCode.NONE, (top, errors)
                assert not fail or code in RETRIABLE
        elif op == "txn_commit":
            try:
                coord.commit_txn_offsets(group, 100 + which, 0, {("t", 1): OffsetCommitEntry(number)})
            except KafkaError as exc:
                assert fail and exc.code in RETRIABLE
        elif op == "marker":
            try:
                coord.complete_transaction(
                    coord.partition_for(group), 100 + which, 0, commit=number % 2 == 0, coordinator_epoch=0
                )
            except KafkaError as exc:
                assert fail and exc.code in RETRIABLE
        elif op in ("join_consumer", "beat_consumer", "leave_consumer"):
            member = f"m{which}"
            epoch = {"join_consumer": 0, "leave_consumer": -1}.get(op, told_members.get(member, (0, {}))[0])
            req = HeartbeatRequest(
                "cg",
                member,
                epoch,
                rebalance_timeout_ms=5000 if epoch == 0 else -1,
                subscribed_topic_names=("t",) if epoch == 0 else None,
                owned={} if epoch == 0 else (told_members.get(member, (0, {}))[1] if number % 2 else None),
            )
            try:
                result = coord.consumer_group_heartbeat(req)
            except KafkaError as exc:
                assert (
                    not fail
                    or exc.code in RETRIABLE
                    or exc.code
                    in (
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        ErrorCode.FENCED_MEMBER_EPOCH,
                    )
                )
            else:
                if epoch == -1:
                    told_members.pop(member, None)
                else:
                    assignment = (
                        result.assignment if result.assignment is not None else told_members[member][1]
                    )
                    told_members[member] = (result.member_epoch, assignment)
        elif op == "classic_join_sync":
            out: list = []
            coord.join_group(
                JoinRequest(
                    "cl",
                    classic_member.get("cl", ""),
                    None,
                    "c",
                    "/h",
                    10_000,
                    10_000,
                    "consumer",
                    [("range", b"m")],
                ),
                out.append,
            )
            if out and out[0].error is ErrorCode.MEMBER_ID_REQUIRED:
                coord.join_group(
                    JoinRequest(
                        "cl", out[0].member_id, None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"m")]
                    ),
                    out.append,
                )
            joined = [r for r in out if r.error is ErrorCode.NONE]
            if joined:
                r = joined[-1]
                classic_member["cl"] = r.member_id
                synced: list = []
                coord.sync_group(
                    "cl", r.member_id, None, r.generation_id, {r.member_id: bytes([number])}, synced.append
                )
                if synced and synced[0].error is not ErrorCode.NONE:
                    assert fail and synced[0].error in RETRIABLE
        elif op == "classic_leave":
            if "cl" in classic_member:
                coord.leave_group("cl", [(classic_member.pop("cl"), None)])
        elif op == "delete_group":
            result = coord.delete_groups([group])[group]
            if result is ErrorCode.NONE:
                for key in [k for k in told_offsets if k[0] == group]:
                    del told_offsets[key]
            else:
                assert not fail or result in RETRIABLE | {
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    ErrorCode.NON_EMPTY_GROUP,
                }
        else:
            clock.advance(number * 300)  # sessions (10 s), revocations (5 s), expiry (20 s, 60 s retention)
        log.fail_appends = None

        # Memory is the log, after every operation, including the ones whose append failed.
        fresh = reloaded(log)
        for p in range(PARTITIONS):
            assert settled_view(fresh, p, coord) == settled_view(coord, p, coord), (op, p)
            history[p].append((len(log.batches[p]), view(coord, p)))
        # What clients were told is what the coordinator has.
        for (group_id, tp), offset in told_offsets.items():
            value = coord.offsets.get(group_id, tp)
            assert (value.offset == offset) if value is not None else op == "advance"  # None: expired
        live = coord.consumer_groups.get("cg")
        for member, (epoch, assignment) in told_members.items():
            if live is not None and member in live.members:
                assert live.members[member].assignment.epoch == epoch
                assert live.members[member].assignment.assigned == assignment
        told_members = {m: t for m, t in told_members.items() if live is not None and m in live.members}
        told_offsets = {k: v for k, v in told_offsets.items() if coord.offsets.get(*k) is not None}

    # A crash that keeps a random prefix of each partition's batches: the state of that moment.
    cut = {}
    expected = {}
    for p in range(PARTITIONS):
        count, state = rnd.choice(history[p])
        cut[p] = count
        # The last state recorded with exactly this many batches is the one a restart must rebuild.
        expected[p] = [s for c, s in history[p] if c == count][-1]
    restarted = reloaded(log, cut)
    for p in range(PARTITIONS):
        got, want = view(restarted, p), expected[p]
        # Classic groups: the restart brings back the last stored (settled) generation.
        assert {k: v for k, v in got.items() if k not in ("classic", "empty")} == {
            k: v for k, v in want.items() if k not in ("classic", "empty")
        }
        for gid, settled in want["classic"].items():
            assert got["classic"].get(gid) == settled
