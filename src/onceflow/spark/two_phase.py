"""The batch-atomic sink's driver side of KIP-939: completing or aborting the transactions a
micro-batch's tasks prepared, all at once, from the driver.

A task's transaction is completed by a producer of the same transactional id that takes it over with
``init_transactions(keep_prepared_txn=True)`` (fencing the task's producer, which is gone anyway) and
calls ``complete_transaction(state)`` with the state the task prepared.

The driver's own commit (:func:`commit_prepared`) first looks at every id's open transaction
(DescribeTransactions, which fences nobody): if one is not the transaction its task prepared, another
writer took the ids over (a second driver on the checkpoint), and the driver is fenced
(:class:`TransactionsTakenOver`) before it completes anything or disturbs the other's transactions.

Finishing an intent a driver left (:func:`complete_all`, on restart) commits what is still open as
prepared and aborts anything else open under the ids; when no transaction is open under an id, its
transaction was completed already (by a completion the dead driver did not live to record). So
finishing an intent twice is harmless, which is what lets a restarted driver finish an intent
whatever part of it was done.

Aborting (:func:`abort_all`) aborts what the driver's own tasks prepared, and whatever is open under
the ids of tasks that did not report.

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

__all__ = [
    "TransactionsTakenOver",
    "abort_all",
    "check_broker_supports_two_phase_commit",
    "commit_prepared",
    "complete_all",
    "two_phase_settings",
]

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


class TransactionsTakenOver(RuntimeError):
    """A driver found that another writer took over its batch's transactional ids: the transactions
    its tasks prepared are no longer the ones open under them (another query on the checkpoint, or
    with the same ``transactional.id.prefix``). The driver is fenced: it completes nothing more.
    ``before_any``: found before any of the batch's transactions was completed (the usual case)."""

    def __init__(self, message: str, *, before_any: bool = True) -> None:
        super().__init__(message)
        self.before_any = before_any


async def _take_over(options: SinkOptions, transactional_id: str) -> tuple[AsyncProducer, PreparedTxnState]:
    """A producer in the id's prepared transaction (if one is open), with that transaction's state."""
    producer = AsyncProducer(two_phase_settings(options, transactional_id))
    try:
        await producer.init_transactions(keep_prepared_txn=True)
    except BaseException:
        await producer.close()
        raise
    return producer, producer.prepared_transaction_state


async def _complete(
    options: SinkOptions, transactional_id: str, state: PreparedTxnState, kept_if_started_by: int | None
) -> bool:
    """Complete one id's prepared transaction; returns whether one was still open.

    ``kept_if_started_by`` (ms): the open transaction of the state's producer id under a later epoch
    that started by then is the prepared one, kept by a take-over that did not complete it (a driver
    that died completing the intent: our broker, unlike Kafka's, moves the kept transaction's epoch
    with each take-over)."""
    producer, found = await _take_over(options, transactional_id)
    try:
        if not found.has_transaction:
            return False
        kept = (
            kept_if_started_by is not None
            and found.producer_id == state.producer_id
            and found.epoch > state.epoch
        )
        if found != state and not kept:
            log.warning(
                "%s: the open transaction (%s) is not the one the batch prepared (%s): aborting it",
                transactional_id,
                found,
                state,
            )
        await producer.complete_transaction(found if kept else state)
        return True
    finally:
        await producer.close()


def complete_all(
    options: SinkOptions,
    transactions: Mapping[str, str],
    after_each: Callable[[int], None] | None = None,
    decided_ms: int | None = None,
) -> int:
    """Finish an intent a driver left (``{transactional id: state text}``, decided at ``decided_ms``):
    commit each prepared transaction that is still open, abort any other transaction open under its
    id (no other driver may be writing: Kafka's ``complete_transaction`` rule); returns how many were
    still open. A transaction of the prepared one's producer id that started before the decision is
    the prepared one, whatever its epoch now (see :func:`_complete`)."""

    async def run() -> int:
        done = 0
        started = await _open_transactions(options, transactions, with_start=True)

        async def one(transactional_id: str, text: str) -> bool:
            nonlocal done
            state, started_ms = started[transactional_id]
            kept = decided_ms if decided_ms is not None and 0 <= started_ms <= decided_ms else None
            opened = await _complete(options, transactional_id, PreparedTxnState.from_string(text), kept)
            done += 1
            if after_each is not None:
                after_each(done)
            return opened

        results = await asyncio.gather(*(one(tid, text) for tid, text in sorted(transactions.items())))
        return sum(results)

    return asyncio.run(run())


def commit_prepared(
    options: SinkOptions,
    transactions: Mapping[str, str],
    after_each: Callable[[int], None] | None = None,
) -> None:
    """Commit the transactions this driver's tasks prepared (``{transactional id: state text}``).
    First every id's open transaction is looked at (DescribeTransactions, which fences nobody): when
    one is not the transaction its task prepared, :class:`TransactionsTakenOver` is raised before
    anything is completed, and whatever is open under the ids (another writer's) stays as it is.
    (Taking an id over to look would bump the epoch of the transaction open under it: a transaction
    kept by such a take-over no longer shows the state its task prepared.)"""

    async def run() -> None:
        wanted = {tid: PreparedTxnState.from_string(text) for tid, text in transactions.items()}
        ids = sorted(wanted)
        found = await _open_transactions(options, ids)
        lost = {tid: state for tid, state in found.items() if state != wanted[tid]}
        if lost:
            raise TransactionsTakenOver(_taken_over_text(lost, wanted))
        done = 0

        async def one(tid: str) -> None:
            nonlocal done
            producer, state = await _take_over(options, tid)
            try:
                if state != wanted[tid]:  # taken over since it was looked at
                    raise TransactionsTakenOver(_taken_over_text({tid: state}, wanted), before_any=False)
                await producer.complete_transaction(wanted[tid])
            finally:
                await producer.close()
            done += 1
            if after_each is not None:
                after_each(done)

        await asyncio.gather(*(one(tid) for tid in ids))

    asyncio.run(run())


async def _open_transactions(
    options: SinkOptions, transactional_ids: Iterable[str], *, with_start: bool = False
) -> dict:
    """The producer id and epoch of the transaction open under each id (empty state: none), over one
    admin connection per coordinator; ``with_start``: each with the transaction's start time (ms, -1
    when none is open)."""
    from onceflow.client.admin import AsyncAdminClient
    from onceflow.client.security import ClientSecurity
    from onceflow.protocol.errors import ErrorCode, KafkaError

    async def one(admin: AsyncAdminClient, tid: str) -> tuple[PreparedTxnState, int]:
        try:
            described = await admin.describe_transaction(tid)
        except KafkaError as exc:
            if exc.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                return PreparedTxnState(), -1
            raise
        if described.state != "Ongoing":
            return PreparedTxnState(), -1
        return PreparedTxnState(described.producer_id, described.producer_epoch), described.start_time_ms

    ids = sorted(set(transactional_ids))
    security = ClientSecurity.from_config(options.extra)
    async with AsyncAdminClient(options.bootstrap, client_id=options.client_id, security=security) as admin:
        found = await asyncio.gather(*(one(admin, tid) for tid in ids))
    return {tid: (f if with_start else f[0]) for tid, f in zip(ids, found, strict=True)}


def _taken_over_text(lost: Mapping[str, PreparedTxnState], wanted: Mapping[str, PreparedTxnState]) -> str:
    tid = sorted(lost)[0]
    found = f"transaction {lost[tid]} is open" if lost[tid].has_transaction else "no transaction is open"
    return (
        f"{len(lost)} of the batch's {len(wanted)} prepared transactions are gone ({tid}: prepared as "
        f"{wanted[tid]}, now {found}): another writer took over the sink's transactional ids"
    )


def abort_all(
    options: SinkOptions, transactional_ids: Iterable[str], prepared: Mapping[str, str] | None = None
) -> None:
    """Abort a batch Spark aborts, before any intent of it. An id in ``prepared`` (``{id: state
    text}``, what this driver's tasks reported) is aborted only if its open transaction is the one
    the task prepared: any other is another writer's, and is left alone. Other ids: whatever is open
    under them (a task that failed before reporting) is aborted."""
    prepared = {tid: PreparedTxnState.from_string(text) for tid, text in (prepared or {}).items()}

    async def plain(transactional_id: str) -> None:
        producer = AsyncProducer(two_phase_settings(options, transactional_id))
        try:
            await producer.init_transactions()
        finally:
            await producer.close()

    async def ours(transactional_id: str) -> None:
        producer, found = await _take_over(options, transactional_id)
        try:
            if found == prepared[transactional_id]:
                await producer.abort_transaction()
        finally:
            await producer.close()

    async def run() -> None:
        found = await _open_transactions(options, prepared) if prepared else {}
        for tid, state in found.items():
            if state.has_transaction and state != prepared[tid]:
                log.warning(
                    "%s: the open transaction (%s) is another writer's, not the %s this batch prepared: "
                    "left as it is",
                    tid,
                    state,
                    prepared[tid],
                )
        await asyncio.gather(
            *(plain(tid) for tid in sorted(set(transactional_ids) - set(prepared))),
            *(ours(tid) for tid, state in sorted(found.items()) if state == prepared[tid]),
        )

    asyncio.run(run())


# The bootstrap addresses whose cluster was found to have KIP-939 in this process. PySpark makes the
# stream writer anew for every driver commit, often in a Python worker it keeps: each would otherwise
# open a connection for ApiVersions before the batch's completions.
_CHECKED: set[str] = set()


def check_broker_supports_two_phase_commit(options: SinkOptions) -> None:
    """One clear line (ValueError) when the cluster has no KIP-939 two-phase commit (asked once per
    process and cluster)."""
    if options.bootstrap in _CHECKED:
        return
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
    _CHECKED.add(options.bootstrap)
