"""The transaction coordinator on the coordinator runtime, under random requests, timers and failing
appends and marker writes.

After every step (including those whose ``__transaction_state`` append failed) each transactional id
must be exactly what replaying the log gives, so memory never runs ahead of the log; a request that
failed must say so with a retriable error; and a crash that keeps any prefix of each partition's
records must bring back exactly the ids of that moment.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.protocol.errors import ErrorCode, KafkaError

from .fakes import FakeTxnLog, make_rig

RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
TIMEOUT_MS = 10_000


def view(coordinator, partition: int | None = None) -> dict:
    """Every id (of ``partition``) as the log decides it: what a restart must rebuild."""
    state = coordinator.state
    return {
        tid: (
            m.state.kafka_name,
            m.producer_id,
            m.producer_epoch,
            m.topic_partitions,
            m.txn_timeout_ms,
            m.next_producer_id,
            m.previous_producer_id,
        )
        for tid, m in state._cache.items()
        if partition is None or state.partition_for(tid) == partition
    }


def reloaded(records):
    return make_rig(log=FakeTxnLog(records=list(records))).coordinator


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "commit", "abort", "timeouts", "expire", "retry"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 3),  # a partition to add; a clock step (x 6 s)
        st.booleans(),  # the append of this step fails
        st.booleans(),  # the markers of this step fail
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(STEPS, st.randoms(use_true_random=False))
def test_every_id_is_its_log_and_a_crash_keeps_what_was_answered(steps, rnd):
    rig = make_rig()
    coordinator = rig.coordinator
    producers: dict[str, tuple[int, int]] = {}
    partitions = sorted({coordinator.state.partition_for(t) for t in "abc"})
    history = {p: [(0, {})] for p in partitions}

    async def step(kind, tid, number, fail, markers_fail) -> None:
        rig.log.fail_with = KafkaError("disk", ErrorCode.KAFKA_STORAGE_ERROR) if fail else None
        rig.markers.fail_with = (
            KafkaError("leader gone", ErrorCode.NOT_LEADER_OR_FOLLOWER) if markers_fail else None
        )
        try:
            if kind == "init":
                answer = await coordinator.init_producer_id(tid, TIMEOUT_MS)
                producers[tid] = (answer.producer_id, answer.producer_epoch)
            elif kind == "add" and tid in producers:
                await coordinator.add_partitions_to_txn(tid, *producers[tid], [("out", number)])
            elif kind in ("commit", "abort") and tid in producers:
                await coordinator.end_txn(tid, *producers[tid], commit=kind == "commit")
            elif kind == "timeouts":
                rig.clock.advance(number * 6_000)
                await coordinator.abort_timed_out_transactions()
            elif kind == "expire":
                rig.clock.advance(number * 6_000)
                await coordinator.expire_transactional_ids()
            elif kind == "retry":
                await coordinator.retry_incomplete_transactions()
        except KafkaError as exc:
            appended = fail and rig.log.fail_with is None  # the failing append was reached
            if appended:
                assert exc.code in RETRIABLE, exc
        finally:
            rig.log.fail_with = None
            rig.markers.fail_with = None

    async def scenario() -> None:
        for kind, tid, number, fail, markers_fail in steps:
            await step(kind, tid, number, fail, markers_fail)
            # Memory is the log after every step, the failed ones included.
            assert view(coordinator) == view(reloaded(rig.log.records)), kind
            for p in partitions:
                count = sum(1 for q, _, _ in rig.log.records if q == p)
                history[p].append((count, view(coordinator, p)))

    asyncio.run(scenario())

    # A crash that keeps a random prefix of each partition's records.
    kept = []
    expected = {}
    for p in partitions:
        count, _ = rnd.choice(history[p])
        expected[p] = [v for c, v in history[p] if c == count][-1]
        kept += [r for r in rig.log.records if r[0] == p][:count]
    restarted = reloaded(kept)
    for p in partitions:
        assert view(restarted, p) == expected[p]


def test_a_failed_append_is_retriable_and_the_retry_succeeds():
    """InitProducerId, AddPartitionsToTxn and EndTxn: a failed append answers a retriable error and
    changes nothing; the same request sent again then succeeds."""
    rig = make_rig()
    coordinator = rig.coordinator

    async def scenario() -> None:
        rig.log.fail_with = KafkaError("disk", ErrorCode.KAFKA_STORAGE_ERROR)
        with pytest.raises(KafkaError) as failed:
            await coordinator.init_producer_id("t", TIMEOUT_MS)
        assert failed.value.code is ErrorCode.NOT_COORDINATOR
        assert view(coordinator) == {} == view(reloaded(rig.log.records))
        pid = await coordinator.init_producer_id("t", TIMEOUT_MS)
        for request in (
            lambda: coordinator.add_partitions_to_txn("t", pid.producer_id, pid.producer_epoch, [("out", 0)]),
            lambda: coordinator.end_txn("t", pid.producer_id, pid.producer_epoch, commit=True),
        ):
            before = view(coordinator)
            rig.log.fail_with = KafkaError("isr", ErrorCode.NOT_ENOUGH_REPLICAS)
            with pytest.raises(KafkaError) as failed:
                await request()
            assert failed.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert view(coordinator) == before == view(reloaded(rig.log.records))
            await request()
        assert view(coordinator)["t"][0] == "CompleteCommit"
        assert view(coordinator) == view(reloaded(rig.log.records))

    asyncio.run(scenario())
