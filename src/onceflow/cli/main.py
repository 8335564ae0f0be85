"""The ``onceflow`` command: one click group, one module per command group."""

from __future__ import annotations

import click

from onceflow import __version__
from onceflow.cli.consume import consume
from onceflow.cli.dump_log import dump_log
from onceflow.cli.groups import groups
from onceflow.cli.pipeline import pipeline
from onceflow.cli.produce import produce
from onceflow.cli.producers import producers
from onceflow.cli.quickstart import quickstart
from onceflow.cli.serve import serve
from onceflow.cli.topics import topics
from onceflow.cli.txn import txn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onceflow")
def cli():
    """onceflow: exactly-once event streaming (a Kafka-protocol broker, client and tools)."""


for command in (serve, topics, produce, consume, dump_log, quickstart, groups, pipeline, txn, producers):
    cli.add_command(command)


def main() -> None:
    """Console entry point (``onceflow``, ``python -m onceflow``)."""
    cli(prog_name="onceflow")


if __name__ == "__main__":
    main()
