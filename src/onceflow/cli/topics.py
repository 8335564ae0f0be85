"""``onceflow topics create|list|describe|delete|delete-records``."""

from __future__ import annotations

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, client_security, friendly_errors, out, parse_key_values
from onceflow.client.simple import SimpleClient


@click.group()
def topics():
    """Create, list, describe and delete topics."""


@topics.command()
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1))
@click.option("--replication-factor", default=1, show_default=True, type=click.IntRange(1))
@click.option(
    "--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config, e.g. retention.ms=60000."
)
@bootstrap_option
def create(name, partitions, replication_factor, configs, bootstrap):
    """Create topic NAME."""
    settings = parse_key_values(configs, "--config")
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        client.create_topic(
            name, partitions=partitions, replication_factor=replication_factor, configs=settings
        )
    out.print(f"created topic {name} with {partitions} partition(s)")


@topics.command(name="list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets, ...).")
@bootstrap_option
def list_(internal, bootstrap):
    """List topic names, one a line."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        names = client.list_topics(include_internal=internal)
    for name in names:
        out.print(name)


@topics.command()
@click.argument("name")
@bootstrap_option
def describe(name, bootstrap):
    """Show the partitions and configs of topic NAME."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        info, configs = client.describe_topic(name)
    table = Table(title=f"topic {name}")
    for column in ("partition", "leader", "epoch", "replicas", "isr", "under-replicated", "error"):
        table.add_column(column)
    under = 0
    for p in sorted(info.partitions.values(), key=lambda p: p.partition):
        lagging = len(p.isr) < len(p.replicas)
        under += lagging
        table.add_row(
            str(p.partition),
            str(p.leader),
            str(p.leader_epoch),
            _ids(p.replicas),
            _ids(p.isr),
            "yes" if lagging else "",
            p.error.name,
        )
    out.print(table)
    if under:
        out.print(f"{under} under-replicated partition(s): a replica is out of the ISR")
    if configs:
        config_table = Table(title="configs")
        config_table.add_column("name")
        config_table.add_column("value")
        for key in sorted(configs):
            config_table.add_row(key, "" if configs[key] is None else str(configs[key]))
        out.print(config_table)


@topics.command()
@click.argument("name")
@bootstrap_option
def delete(name, bootstrap):
    """Delete topic NAME and its data."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        client.delete_topic(name)
    out.print(f"deleted topic {name}")


@topics.command(name="delete-records")
@click.argument("name")
@click.option(
    "--before",
    required=True,
    type=click.IntRange(-1),
    help="Delete every record below this offset; -1 means the high watermark (all records).",
)
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    type=click.IntRange(0),
    help="Partition to delete from (repeatable); all partitions when omitted.",
)
@bootstrap_option
def delete_records(name, before, partitions, bootstrap):
    """Delete the records of topic NAME below an offset (DeleteRecords, as kafka-delete-records):
    consumers then start at the new log start, shown per partition."""
    from onceflow.client.admin import AdminClient
    from onceflow.client.consumer.structs import TopicPartition

    with friendly_errors(bootstrap), AdminClient(bootstrap, security=client_security()) as admin:
        if not partitions:
            partitions = sorted(admin.describe_topic(name).partitions)
        starts = admin.delete_records({TopicPartition(name, p): before for p in partitions})
    table = Table(title=f"topic {name}")
    table.add_column("partition")
    table.add_column("log start offset")
    for tp in sorted(starts, key=lambda tp: tp.partition):
        table.add_row(str(tp.partition), str(starts[tp]))
    out.print(table)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)
