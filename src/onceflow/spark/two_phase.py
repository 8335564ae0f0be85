"""The batch-atomic sink's driver side of KIP-939: completing or aborting the transactions a
micro-batch's tasks prepared, all at once, from the driver.

A task's transaction is completed by a producer of the same transactional id that takes it over with
``init_transactions(keep_prepared_txn=True)`` (fencing the task's producer, which is gone anyway) and
calls ``complete_transaction(state)`` with the state the task prepared: it commits when the
transaction open under that id is the one the task prepared, and aborts anything else. When no
transaction is open under the id, this one was completed already (by an earlier completion that the
driver did not live to record); nothing is left to do. So completing an intent twice is harmless,
which is what lets a restarted driver finish an intent whatever part of it was done.

Aborting is a plain ``init_transactions()`` of the id: the coordinator aborts what is open under it.

Every id is handled concurrently on one event loop; ``after_each`` (the fault points of the tests)
runs after each completion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from onceflow.client.producer import AsyncProducer, PreparedTxnState
from onceflow.spark.sink_options import SinkOptions, producer_settings

log = logging.getLogger(__name__)

__all__ = ["abort_all", "check_broker_supports_two_phase_commit", "complete_all", "two_phase_settings"]

_SKIP = {"bootstrap.servers", "client.id", "transactional.id", "transaction.timeout.ms", "group.id"}


def two_phase_settings(options: SinkOptions, transactional_id: str) -> dict:
    """The producer settings of one of the sink's two-phase commit transactional ids."""
    return {
        **producer_settings(options.extra, _SKIP),
        "bootstrap.servers": options.bootstrap,
        "client.id": options.client_id,
        "transactional.id": transactional_id,
        "transaction.two.phase.commit.enable": True,
    }


async def _complete(options: SinkOptions, transactional_id: str, state: PreparedTxnState) -> bool:
    """Complete one id's prepared transaction; returns whether one was still open."""
    producer = AsyncProducer(two_phase_settings(options, transactional_id))
    try:
        await producer.init_transactions(keep_prepared_txn=True)
        found = producer.prepared_transaction_state
        if not found.has_transaction:
            return False
        if found != state:
            log.warning(
                "%s: the open transaction (%s) is not the one the batch prepared (%s): aborting it",
                transactional_id,
                found,
                state,
            )
        await producer.complete_transaction(state)
        return True
    finally:
        await producer.close()


def complete_all(
    options: SinkOptions,
    transactions: Mapping[str, str],
    after_each: Callable[[int], None] | None = None,
) -> int:
    """Complete (commit) every prepared transaction of an intent (``{transactional id: state text}``);
    returns how many were still open."""

    async def run() -> int:
        done = 0

        async def one(transactional_id: str, text: str) -> bool:
            nonlocal done
            opened = await _complete(options, transactional_id, PreparedTxnState.from_string(text))
            done += 1
            if after_each is not None:
                after_each(done)
            return opened

        results = await asyncio.gather(*(one(tid, text) for tid, text in sorted(transactions.items())))
        return sum(results)

    return asyncio.run(run())


def abort_all(options: SinkOptions, transactional_ids: Iterable[str]) -> None:
    """Abort whatever is open under each id (a batch Spark aborts, before any intent of it)."""

    async def one(transactional_id: str) -> None:
        producer = AsyncProducer(two_phase_settings(options, transactional_id))
        try:
            await producer.init_transactions()
        finally:
            await producer.close()

    async def run() -> None:
        await asyncio.gather(*(one(tid) for tid in sorted(set(transactional_ids))))

    asyncio.run(run())


def check_broker_supports_two_phase_commit(options: SinkOptions) -> None:
    """One clear line (ValueError) when the cluster has no KIP-939 two-phase commit."""
    from kafka.protocol.producer import InitProducerIdRequest

    from onceflow.client import AsyncClient
    from onceflow.client.producer.txn_requests import TWO_PHASE_INIT_PRODUCER_ID_VERSION

    async def highest() -> int:
        async with AsyncClient(options.bootstrap) as client:
            conn = await client.any_connection()
            return conn.version_for(InitProducerIdRequest)

    version = asyncio.run(highest())
    if version < TWO_PHASE_INIT_PRODUCER_ID_VERSION:
        raise ValueError(
            f"guarantee=exactly-once-atomic needs KIP-939 two-phase commit (InitProducerId v6), which the "
            f"broker at {options.bootstrap} lacks (up to v{version}): use guarantee=exactly-once "
            "(each task's part of a batch is atomic on its own)"
        )
