"""``onceflow txn list|describe|find-hanging|abort``: Kafka's ``kafka-transactions.sh`` (KIP-664).

What counts as *hanging* is :mod:`onceflow.client.hanging_transactions`'s rule. ``abort`` writes an
ABORT marker for one (WriteTxnMarkers), after which the LSO moves on.
"""

from __future__ import annotations

import asyncio
import time

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.client import hanging_transactions
from onceflow.client.admin import TRANSACTION_STATES, AsyncAdminClient
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.hanging_transactions import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
from onceflow.protocol.errors import KafkaError


async def _list(bootstrap: str, states, pids, duration_ms: int, pattern: str | None = None):
    """The listed ids, and the description of each open one (for its age and two-phase mark)."""
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        listed = await admin.list_transactions(
            list(states), producer_ids=list(pids), min_duration_ms=duration_ms, pattern=pattern
        )
        described = {}
        for t in listed:
            if t.state in _OPEN_STATES:
                try:
                    described[t.transactional_id] = await admin.describe_transaction(t.transactional_id)
                except KafkaError:
                    pass  # completed or expired since it was listed: shown without age
        return listed, described


_OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


async def _describe(bootstrap: str, transactional_id: str):
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        return await admin.describe_transaction(transactional_id)


async def _find_hanging(bootstrap: str, topic: str | None, max_timeout_ms: int):
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        return await hanging_transactions.find_hanging(admin, topic, max_timeout_ms)


async def _abort(
    bootstrap: str, topic: str, partition: int, producer_id, producer_epoch, coordinator_epoch, start
):
    tp = TopicPartition(topic, partition)
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        if start is not None:
            for producer in await admin.describe_producers(tp):
                if producer.current_transaction_start_offset == start:
                    producer_id, producer_epoch = producer.producer_id, producer.producer_epoch
                    coordinator_epoch = max(producer.coordinator_epoch, 0)
                    break
            else:
                raise click.ClickException(
                    f"no open transaction starts at offset {start} in {topic}-{partition}"
                )
        if producer_id is None or producer_epoch is None:
            raise click.UsageError("give --start-offset, or --producer-id and --producer-epoch")
        await admin.abort_transaction(tp, producer_id, producer_epoch, coordinator_epoch)
    return producer_id, producer_epoch


@click.group()
def txn():
    """List, describe and abort transactions; find hanging ones."""


@txn.command(name="list")
@click.option("--state", "states", multiple=True, help="Only these states (Ongoing, PrepareCommit, ...).")
@click.option("--producer-id", "pids", multiple=True, type=int, help="Only these producer ids.")
@click.option("--min-duration-ms", default=-1, type=int, help="Only transactions running longer than this.")
@click.option(
    "--transactional-id-pattern",
    "pattern",
    help="Only transactional ids this regular expression matches whole (RE2 syntax, as Kafka's).",
)
@bootstrap_option
def list_(states, pids, min_duration_ms, pattern, bootstrap):
    """List transactional ids and their states."""
    with friendly_errors(bootstrap):
        listed, described = asyncio.run(_list(bootstrap, states, pids, min_duration_ms, pattern))
    for unknown in [s for s in states if s not in TRANSACTION_STATES]:
        out.print(f"unknown state filter: {unknown}")
    now_ms = int(time.time() * 1000)
    table = Table()
    for column in ("transactional id", "producer id", "state", "two-phase", "open for"):
        table.add_column(column)
    for t in listed:
        d = described.get(t.transactional_id)
        # An open transaction of a two-phase commit producer (being written, or prepared) waits for
        # its external coordinator's decision, with no timeout, and holds the LSO until then.
        two_phase = "yes" if d is not None and d.is_two_phase_commit else ""
        table.add_row(
            t.transactional_id, str(t.producer_id), t.state, two_phase, _age(d.age_ms(now_ms) if d else None)
        )
    out.print(table)


@txn.command()
@click.argument("transactional_id")
@bootstrap_option
def describe(transactional_id, bootstrap):
    """Show the state, producer and partitions of TRANSACTIONAL_ID."""
    with friendly_errors(bootstrap):
        d = asyncio.run(_describe(bootstrap, transactional_id))
    table = Table(title=f"transaction {transactional_id}")
    for column in ("state", "producer id", "epoch", "timeout ms", "started ms", "partitions"):
        table.add_column(column)
    partitions = ", ".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions)
    table.add_row(
        d.state,
        str(d.producer_id),
        str(d.producer_epoch),
        str(d.timeout_ms),
        str(d.start_time_ms),
        partitions or "-",
    )
    out.print(table)


@txn.command(name="find-hanging")
@click.option("--topic", default=None, help="Only this topic (default: every non-internal topic).")
@click.option(
    "--max-transaction-timeout-ms",
    default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    show_default=True,
    type=int,
    help="Open longer than this counts as hanging (the broker's transaction.max.timeout.ms).",
)
@bootstrap_option
def find_hanging(topic, max_transaction_timeout_ms, bootstrap):
    """Open transactions in partitions that the coordinator does not know as ongoing."""
    with friendly_errors(bootstrap):
        hanging = asyncio.run(_find_hanging(bootstrap, topic, max_transaction_timeout_ms))
    if not hanging:
        out.print("no hanging transactions")
        return
    table = Table(title="hanging transactions")
    for column in ("topic", "partition", "producer id", "epoch", "coordinator epoch", "start offset"):
        table.add_column(column)
    for tp, p in hanging:
        table.add_row(
            tp.topic,
            str(tp.partition),
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch),
            str(p.current_transaction_start_offset),
        )
    out.print(table)


@txn.command()
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.option("--start-offset", type=int, default=None, help="First offset of the transaction to abort.")
@click.option("--producer-id", type=int, default=None)
@click.option("--producer-epoch", type=int, default=None)
@click.option("--coordinator-epoch", type=int, default=0, show_default=True)
@bootstrap_option
def abort(topic, partition, start_offset, producer_id, producer_epoch, coordinator_epoch, bootstrap):
    """Write an ABORT marker for a hanging transaction so that the LSO moves again."""
    with friendly_errors(bootstrap):
        pid, epoch = asyncio.run(
            _abort(bootstrap, topic, partition, producer_id, producer_epoch, coordinator_epoch, start_offset)
        )
    out.print(f"aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-{partition}")
