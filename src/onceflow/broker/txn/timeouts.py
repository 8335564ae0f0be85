"""The transaction coordinator's timed operations on one partition of ``__transaction_state``.

Each is an operation of the coordinator runtime: it reads the ids of the partition, prepares their
transitions and returns them as one batch; the runtime appends and replays it (the replay applies
each prepared transition). If the append fails every prepared transition is dropped: the ids stay as
they were and the next run tries again.

- :func:`fence_timed_out`: an Ongoing transaction older than its ``transaction.timeout.ms`` moves to
  PrepareAbort with its epoch bumped, so that its producer is fenced (Kafka's
  ``abortTimedOutTransactions``); the coordinator then writes the ABORT markers.
- :func:`expire_idle`: an id idle (Empty or Complete*) for ``transactional.id.expiration.ms`` gets a
  tombstone and leaves the cache (Kafka's ``removeExpiredTransactionalIds``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from onceflow.broker.coordinator.records import CoordinatorResult
from onceflow.broker.txn.metadata import PREPARE_STATES, TransactionMetadata, TxnTransition
from onceflow.broker.txn.state_manager import TransactionStateManager
from onceflow.protocol.errors import KafkaError

if TYPE_CHECKING:
    from onceflow.broker.txn.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

ABORT_TIMER = "abort-timed-out-transactions"
EXPIRY_TIMER = "expire-transactional-ids"
TIMER_KEYS = (ABORT_TIMER, EXPIRY_TIMER)


def _batch_of(
    state: TransactionStateManager,
    prepared: list[tuple[TransactionMetadata, TxnTransition]],
    response: object,
) -> CoordinatorResult:
    def drop(error: KafkaError) -> None:
        for metadata, transition in prepared:
            state.not_written(metadata.transactional_id)
            if metadata.pending_transition is transition:
                metadata.abort_transition(transition)

    return CoordinatorResult(
        [state.record_of(m.transactional_id, t) for m, t in prepared], response, on_failed=drop
    )


def fence_timed_out(
    state: TransactionStateManager, partition: int, now_ms: int
) -> CoordinatorResult[list[TransactionMetadata]]:
    prepared = [
        (m, m.prepare_fence_producer_epoch(now_ms)) for m in state.timed_out_transactions(partition, now_ms)
    ]
    for metadata, _ in prepared:
        log.info("aborting transactional id %r after its timeout", metadata.transactional_id)
    return _batch_of(state, prepared, [m for m, _ in prepared])


def expire_idle(state: TransactionStateManager, partition: int, now_ms: int) -> CoordinatorResult[list[str]]:
    prepared = [(m, m.prepare_dead()) for m in state.expirable_metadata(partition, now_ms)]
    if prepared:
        log.info("expiring %d idle transactional ids of __transaction_state-%d", len(prepared), partition)
    return _batch_of(state, prepared, [m.transactional_id for m, _ in prepared])


def schedule_timers(coordinator: TransactionCoordinator, partition: int) -> None:
    """The two periodic operations of a loaded partition (each schedules its next run first):
    aborting timed-out transactions, then completing them and any completion that failed earlier, on
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``; expiring idle ids on
    ``transaction.remove.expired.transaction.cleanup.interval.ms``."""
    runtime, config = coordinator.runtime, coordinator.config
    abort_ms = config.transaction_abort_timed_out_transaction_cleanup_interval_ms
    expire_ms = config.transaction_remove_expired_transaction_cleanup_interval_ms

    def abort_timed_out() -> CoordinatorResult[list[TransactionMetadata]]:
        runtime.schedule_timer(partition, abort_ms, abort_timed_out, key=ABORT_TIMER, retry=False)
        result = coordinator.fence_timed_out(partition)
        fenced = result.response or []

        def complete() -> None:
            for metadata in {*fenced, *coordinator.state.ids_of(partition)}:
                if metadata.state in PREPARE_STATES and not metadata.pending_transition_in_progress:
                    coordinator.complete_soon(metadata)

        result.on_written = complete
        return result

    def expire() -> CoordinatorResult[list[str]]:
        runtime.schedule_timer(partition, expire_ms, expire, key=EXPIRY_TIMER, retry=False)
        return coordinator.expire_idle(partition)

    runtime.schedule_timer(partition, abort_ms, abort_timed_out, key=ABORT_TIMER, retry=False)
    runtime.schedule_timer(partition, expire_ms, expire, key=EXPIRY_TIMER, retry=False)
