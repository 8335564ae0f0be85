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
from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.producer import WriteTxnMarkersRequest
from rich.table import Table

from onceflow.cli.common import bootstrap_option, friendly_errors, out
from onceflow.client.async_client import AsyncClient, parse_bootstrap
from onceflow.client.connection import Connection
from onceflow.protocol.errors import ErrorCode, KafkaError

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms


async def _connect(bootstrap: str) -> Connection:
    host, port = parse_bootstrap(bootstrap)[0]
    return await Connection.open(host, port, client_id="onceflow-txn")


def _check(code: int, what: str) -> None:
    if code:
        raise KafkaError(f"{what}: {ErrorCode(code).name}", code)


async def _list(bootstrap: str, states, pids, duration_ms: int, pattern: str | None = None):
    conn = await _connect(bootstrap)
    try:
        resp = await conn.send(
            ListTransactionsRequest(
                state_filters=list(states),
                producer_id_filters=list(pids),
                duration_filter=duration_ms,
                transactional_id_pattern=pattern,
            )
        )
    finally:
        await conn.close()
    _check(resp.error_code, "ListTransactions")
    return resp


async def _describe(bootstrap: str, ids: list[str]):
    conn = await _connect(bootstrap)
    try:
        resp = await conn.send(DescribeTransactionsRequest(transactional_ids=ids))
    finally:
        await conn.close()
    return resp.transaction_states


async def _open_transactions(bootstrap: str, topic: str | None):
    """``(topic, partition, producer state)`` for every producer with an open transaction."""
    async with AsyncClient(bootstrap) as client:
        metadata = await client.metadata(None if topic is None else [topic])
    wanted = {
        name: sorted(info.partitions)
        for name, info in metadata.topics.items()
        if info.error == ErrorCode.NONE and (topic is not None or not info.internal)
    }
    if topic is not None and topic not in wanted:
        raise KafkaError(f"topic {topic!r} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not wanted:
        return []
    R = DescribeProducersRequest
    conn = await _connect(bootstrap)
    try:
        resp = await conn.send(
            R(topics=[R.TopicRequest(name=name, partition_indexes=parts) for name, parts in wanted.items()])
        )
    finally:
        await conn.close()
    found = []
    for t in resp.topics:
        for p in t.partitions:
            for producer in p.active_producers if not p.error_code else []:
                if producer.current_txn_start_offset >= 0:
                    found.append((t.name, p.partition_index, producer))
    return found


async def _find_hanging(bootstrap: str, topic: str | None, max_timeout_ms: int):
    candidates = await _open_transactions(bootstrap, topic)
    if not candidates:
        return []
    listed = await _list(bootstrap, [], sorted({c[2].producer_id for c in candidates}), -1)
    by_pid: dict[int, list] = {}
    for t in listed.transaction_states:
        by_pid.setdefault(t.producer_id, []).append(t.transactional_id)
    described = {}
    ids = sorted({tid for tids in by_pid.values() for tid in tids})
    if ids:
        described = {d.transactional_id: d for d in await _describe(bootstrap, ids) if d.error_code == 0}
    now = int(time.time() * 1000)
    hanging = []
    for topic_name, partition, producer in candidates:
        ongoing = False
        for tid in by_pid.get(producer.producer_id, []):
            d = described.get(tid)
            if d is None or d.transaction_state != "Ongoing" or d.producer_epoch < producer.producer_epoch:
                continue
            if any(t.topic == topic_name and partition in t.partitions for t in d.topics):
                ongoing = True
        too_old = producer.last_timestamp >= 0 and now - producer.last_timestamp > max_timeout_ms
        if not ongoing or too_old:
            hanging.append((topic_name, partition, producer))
    return hanging


async def _abort(
    bootstrap: str, topic: str, partition: int, producer_id, producer_epoch, coordinator_epoch, start
):
    if start is not None:
        for _topic, p, producer in await _open_transactions(bootstrap, topic):
            if p == partition and producer.current_txn_start_offset == start:
                producer_id, producer_epoch = producer.producer_id, producer.producer_epoch
                coordinator_epoch = max(producer.coordinator_epoch, 0)
                break
        else:
            raise click.ClickException(f"no open transaction starts at offset {start} in {topic}-{partition}")
    if producer_id is None or producer_epoch is None:
        raise click.UsageError("give --start-offset, or --producer-id and --producer-epoch")
    R = WriteTxnMarkersRequest
    M = R.WritableTxnMarker
    conn = await _connect(bootstrap)
    try:
        resp = await conn.send(
            R(
                markers=[
                    M(
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        transaction_result=False,
                        topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                        coordinator_epoch=coordinator_epoch,
                        transaction_version=0,
                    )
                ]
            )
        )
    finally:
        await conn.close()
    code = resp.markers[0].topics[0].partitions[0].error_code
    _check(code, f"abort marker for producer {producer_id} in {topic}-{partition}")
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
        resp = asyncio.run(_list(bootstrap, states, pids, min_duration_ms, pattern))
    for unknown in resp.unknown_state_filters:
        out.print(f"unknown state filter: {unknown}")
    table = Table()
    for column in ("transactional id", "producer id", "state"):
        table.add_column(column)
    for t in sorted(resp.transaction_states, key=lambda t: t.transactional_id):
        table.add_row(t.transactional_id, str(t.producer_id), t.transaction_state)
    out.print(table)


@txn.command()
@click.argument("transactional_id")
@bootstrap_option
def describe(transactional_id, bootstrap):
    """Show the state, producer and partitions of TRANSACTIONAL_ID."""
    with friendly_errors(bootstrap):
        (d,) = asyncio.run(_describe(bootstrap, [transactional_id]))
        _check(d.error_code, f"transactional id {transactional_id!r}")
    table = Table(title=f"transaction {transactional_id}")
    for column in ("state", "producer id", "epoch", "timeout ms", "started ms", "partitions"):
        table.add_column(column)
    partitions = ", ".join(f"{t.topic}-{p}" for t in d.topics for p in t.partitions)
    table.add_row(
        d.transaction_state,
        str(d.producer_id),
        str(d.producer_epoch),
        str(d.transaction_timeout_ms),
        str(d.transaction_start_time_ms),
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
    for topic_name, partition, p in hanging:
        table.add_row(
            topic_name,
            str(partition),
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch),
            str(p.current_txn_start_offset),
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
