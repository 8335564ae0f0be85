"""``onceflow txn list|describe|find-hanging|abort``: Kafka's ``kafka-transactions.sh`` (KIP-664).

A *hanging* transaction is one a partition still holds open (its first offset keeps the last stable
offset back, so read_committed consumers stop there) while the coordinator does not know it as an
ongoing transaction of that producer touching that partition, or it has run longer than
``transaction.max.timeout.ms``. ``abort`` writes an ABORT marker for it (WriteTxnMarkers), after
which the LSO moves on.
"""

from __future__ import annotations

import asyncio
import time

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.client.admin import TRANSACTION_STATES, AsyncAdminClient, ProducerState
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import KafkaError

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms


async def _list(bootstrap: str, states, pids, duration_ms: int, pattern: str | None = None):
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        return await admin.list_transactions(
            list(states), producer_ids=list(pids), min_duration_ms=duration_ms, pattern=pattern
        )


async def _describe(bootstrap: str, transactional_id: str):
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        return await admin.describe_transaction(transactional_id)


async def _open_transactions(
    admin: AsyncAdminClient, topic: str | None
) -> list[tuple[TopicPartition, ProducerState]]:
    """Every producer with an open transaction in ``topic`` (default: every non-internal topic)."""
    # One Metadata request; a named topic that does not exist raises UNKNOWN_TOPIC_OR_PARTITION.
    topics = await admin.describe_topics(None if topic is None else [topic])
    tps = [TopicPartition(name, p) for name, info in sorted(topics.items()) for p in sorted(info.partitions)]
    if not tps:
        return []
    found = []
    for tp, producers in (await admin.describe_producers_of(tps)).items():
        if isinstance(producers, KafkaError):
            continue  # e.g. deleted since it was listed
        found += [(tp, p) for p in producers if p.current_transaction_start_offset >= 0]
    return found


async def _find_hanging(bootstrap: str, topic: str | None, max_timeout_ms: int):
    async with AsyncAdminClient(bootstrap, client_id="onceflow-txn", security=client_security()) as admin:
        candidates = await _open_transactions(admin, topic)
        if not candidates:
            return []
        listed = await admin.list_transactions(producer_ids=sorted({c[1].producer_id for c in candidates}))
        by_pid: dict[int, list[str]] = {}
        for t in listed:
            by_pid.setdefault(t.producer_id, []).append(t.transactional_id)
        described = {}
        for tid in sorted({tid for tids in by_pid.values() for tid in tids}):
            try:
                described[tid] = await admin.describe_transaction(tid)
            except KafkaError:
                continue  # expired or gone since it was listed: its transactions count as unknown
    now = int(time.time() * 1000)
    hanging = []
    for tp, producer in candidates:
        ongoing = False
        for tid in by_pid.get(producer.producer_id, []):
            d = described.get(tid)
            if d is None or d.state != "Ongoing" or d.producer_epoch < producer.producer_epoch:
                continue
            if tp in d.partitions:
                ongoing = True
        too_old = producer.last_timestamp >= 0 and now - producer.last_timestamp > max_timeout_ms
        if not ongoing or too_old:
            hanging.append((tp, producer))
    return hanging


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
        listed = asyncio.run(_list(bootstrap, states, pids, min_duration_ms, pattern))
    for unknown in [s for s in states if s not in TRANSACTION_STATES]:
        out.print(f"unknown state filter: {unknown}")
    table = Table()
    for column in ("transactional id", "producer id", "state"):
        table.add_column(column)
    for t in listed:
        table.add_row(t.transactional_id, str(t.producer_id), t.state)
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
