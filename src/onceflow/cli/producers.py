"""``onceflow producers describe --topic T --partition P``: Kafka's ``kafka-transactions.sh
describe-producers`` (KIP-664): the producers a partition keeps state for."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import click
from kafka.protocol.admin import DescribeProducersRequest
from rich.table import Table

from onceflow.cli.common import bootstrap_option, friendly_errors, out
from onceflow.client.async_client import parse_bootstrap
from onceflow.client.connection import Connection
from onceflow.protocol.errors import ErrorCode, KafkaError


async def describe_partition_producers(bootstrap: str, topic: str, partition: int) -> list:
    """The DescribeProducers ``ProducerState`` entries of one partition; raises the partition's error."""
    host, port = parse_bootstrap(bootstrap)[0]
    conn = await Connection.open(host, port, client_id="onceflow-producers")
    try:
        request = DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])]
        )
        response = await conn.send(request)
    finally:
        await conn.close()
    answer = response.topics[0].partitions[0]
    if answer.error_code:
        message = answer.error_message or ErrorCode(answer.error_code).name
        raise KafkaError(f"{topic}-{partition}: {message}", answer.error_code)
    return list(answer.active_producers)


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
            "-" if state.current_txn_start_offset < 0 else str(state.current_txn_start_offset),
        )
    out.print(table)
