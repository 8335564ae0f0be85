"""The transaction coordinator's timers as operations of the coordinator runtime: they run on each
loaded partition, abort a transaction past its timeout (then complete it), expire idle ids, and stop
with the partition's unload."""

from __future__ import annotations

import asyncio

from onceflow.broker.coordinator.scheduler import ManualScheduler
from onceflow.broker.txn import TransactionConfig, TransactionCoordinator

from .fakes import CountingIds, FakeMarkers, FakeTxnLog

CONFIG = TransactionConfig(
    transactional_id_expiration_ms=60_000,
    transaction_abort_timed_out_transaction_cleanup_interval_ms=1_000,
    transaction_remove_expired_transaction_cleanup_interval_ms=5_000,
)


def coordinator(clock: ManualScheduler) -> tuple[TransactionCoordinator, FakeMarkers]:
    markers = FakeMarkers()
    coord = TransactionCoordinator(
        log_writer=FakeTxnLog(num_partitions=CONFIG.transaction_state_log_num_partitions),
        marker_writer=markers,
        producer_ids=CountingIds(),
        config=CONFIG,
        clock_ms=clock.now_ms,
        complete_in_background=True,
        scheduler=clock,
    )
    coord.load(coordinator_epoch=0)
    coord.start_timers()
    return coord, markers


def test_the_abort_timer_fences_a_timed_out_transaction_and_completes_it():
    async def scenario() -> None:
        clock = ManualScheduler()
        coord, markers = coordinator(clock)
        pid = await coord.init_producer_id("slow", 3_000)
        await coord.add_partitions_to_txn("slow", pid.producer_id, pid.producer_epoch, [("out", 0)])
        clock.advance(3_000)  # at the timeout: not yet
        await coord.drain_completions()
        assert coord.state.get("slow").state.kafka_name == "Ongoing"
        clock.advance(1_000)
        await asyncio.sleep(0)  # the fence's commit
        await coord.drain_completions()
        md = coord.state.get("slow")
        assert (md.state.kafka_name, md.producer_epoch) == ("CompleteAbort", pid.producer_epoch + 1)
        [marker] = markers.written
        assert not marker.commit and marker.producer_epoch == pid.producer_epoch + 1

    asyncio.run(scenario())


def test_the_expiry_timer_removes_idle_ids_and_an_unloaded_partition_runs_no_timer():
    async def scenario() -> None:
        clock = ManualScheduler()
        coord, _ = coordinator(clock)
        await coord.init_producer_id("idle", 3_000)
        await coord.init_producer_id("other", 3_000)
        partition = coord.state.partition_for("other")
        coord.unload_partition(partition)
        clock.advance(CONFIG.transactional_id_expiration_ms + 5_000)
        await asyncio.sleep(0)
        assert coord.state.partition_for("idle") != partition  # (two ids on two partitions)
        assert coord.state.get("idle") is None  # expired by its partition's timer
        coord.load_partition(partition, coordinator_epoch=1)
        assert coord.state.get("other") is not None  # its partition's timer had stopped with it

    asyncio.run(scenario())
