"""``onceflow producers describe --topic T --partition P``: Kafka's ``kafka-transactions.sh
describe-producers`` (KIP-664): the producers a partition keeps state for."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out
from onceflow.client.admin import AsyncAdminClient, ProducerState
from onceflow.client.consumer.structs import TopicPartition


async def describe_partition_producers(bootstrap: str, topic: str, partition: int) -> list[ProducerState]:
    """The producers one partition keeps state for; raises the partition's error."""
    async with AsyncAdminClient(
        bootstrap, client_id="onceflow-producers", security=client_security()
    ) as admin:
        return await admin.describe_producers(TopicPartition(topic, partition))


def _timestamp(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


@click.group()
def producers():
    """Inspect the idempotent and transactional producers a partition knows."""


@producers.command()
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partition", required=True, type=click.IntRange(0), help="Partition index.")
@bootstrap_option
def describe(topic, partition, bootstrap):
    """Producer id, epoch, last sequence, last timestamp and open-transaction start of each producer."""
    with friendly_errors(bootstrap):
        states = asyncio.run(describe_partition_producers(bootstrap, topic, partition))
    if not states:
        out.print(f"no active producers in {topic}-{partition}")
        return
    table = Table(title=f"producers of {topic}-{partition}")
    for column in (
        "producer id",
        "epoch",
        "last sequence",
        "last timestamp",
        "coordinator epoch",
        "txn start offset",
    ):
        table.add_column(column)
    for state in states:
        table.add_row(
            str(state.producer_id),
            str(state.producer_epoch),
            str(state.last_sequence),
            _timestamp(state.last_timestamp),
            str(state.coordinator_epoch),
            "-"
            if state.current_transaction_start_offset < 0
            else str(state.current_transaction_start_offset),
        )
    out.print(table)
