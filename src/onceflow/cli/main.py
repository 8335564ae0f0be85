"""The ``onceflow`` command: one click group, one module per command group.

Command modules are imported only when their command runs (``LazyGroup``): ``onceflow serve`` then
loads the broker and not the client, rich tables or the Spark tooling, which shortens every broker
start (restart time is a benchmark target, see ``bench/idempotence.py``).
"""

from __future__ import annotations

import importlib

import click

from onceflow import __version__

# command name -> "module:attribute"; the order is the order of ``onceflow --help``
COMMANDS = {
    "serve": "onceflow.cli.serve:serve",
    "cluster": "onceflow.cli.cluster:cluster",
    "metadata-quorum": "onceflow.cli.metadata_quorum:metadata_quorum",
    "topics": "onceflow.cli.topics:topics",
    "produce": "onceflow.cli.produce:produce",
    "consume": "onceflow.cli.consume:consume",
    "dump-log": "onceflow.cli.dump_log:dump_log",
    "quickstart": "onceflow.cli.quickstart:quickstart",
    "groups": "onceflow.cli.groups:groups",
    "pipeline": "onceflow.cli.pipeline:pipeline",
    "txn": "onceflow.cli.txn:txn",
    "producers": "onceflow.cli.producers:producers",
    "quotas": "onceflow.cli.quotas:quotas",
    "console": "onceflow.cli.console:console",
    "acls": "onceflow.cli.acls:acls",
    "users": "onceflow.cli.users:users",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [
            *self._lazy_commands,
            *(name for name in super().list_commands(ctx) if name not in self._lazy_commands),
        ]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy_commands.get(cmd_name)
        if target is None or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        self.add_command(command, cmd_name)
        return command


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onceflow")
def cli():
    """onceflow: exactly-once event streaming (a Kafka-protocol broker, client and tools)."""


def main() -> None:
    """Console entry point (``onceflow``, ``python -m onceflow``)."""
    cli(prog_name="onceflow")


if __name__ == "__main__":
    main()
