"""``onceflow topics create|list|describe|delete``."""

from __future__ import annotations

import click
from rich.table import Table

from onceflow.cli.common import bootstrap_option, friendly_errors, out, parse_key_values
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
    with friendly_errors(bootstrap), SimpleClient(bootstrap) as client:
        client.create_topic(
            name, partitions=partitions, replication_factor=replication_factor, configs=settings
        )
    out.print(f"created topic {name} with {partitions} partition(s)")


@topics.command(name="list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets, ...).")
@bootstrap_option
def list_(internal, bootstrap):
    """List topic names, one a line."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap) as client:
        names = client.list_topics(include_internal=internal)
    for name in names:
        out.print(name)


@topics.command()
@click.argument("name")
@bootstrap_option
def describe(name, bootstrap):
    """Show the partitions and configs of topic NAME."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap) as client:
        info, configs = client.describe_topic(name)
    table = Table(title=f"topic {name}")
    for column in ("partition", "leader", "replicas", "isr", "error"):
        table.add_column(column)
    for p in sorted(info.partitions.values(), key=lambda p: p.partition):
        table.add_row(str(p.partition), str(p.leader), _ids(p.replicas), _ids(p.isr), p.error.name)
    out.print(table)
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
    with friendly_errors(bootstrap), SimpleClient(bootstrap) as client:
        client.delete_topic(name)
    out.print(f"deleted topic {name}")


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)
