"""``onceflow consume``: print a topic's records, like Kafka's console consumer."""

from __future__ import annotations

import click

from onceflow.cli.common import bootstrap_option, err, friendly_errors
from onceflow.client.simple import SimpleClient


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


@click.command()
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset, not the end.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option("--max-messages", type=click.IntRange(1), default=None, help="Stop after this many records.")
@click.option(
    "--timeout", type=click.FloatRange(0), default=None, help="Stop after this many seconds without records."
)
@click.option("--print-key", is_flag=True, help="Print KEY<SEP>VALUE.")
@click.option("--key-separator", default="\t", show_default="tab")
@bootstrap_option
def consume(
    topic, from_beginning, isolation_level, max_messages, timeout, print_key, key_separator, bootstrap
):
    """Print the values of TOPIC's records, one a line (Ctrl-C stops)."""
    count = 0
    with friendly_errors(bootstrap), SimpleClient(bootstrap) as client:
        records = client.consume(
            topic,
            from_beginning=from_beginning,
            isolation_level=isolation_level,
            max_messages=max_messages,
            timeout_s=timeout,
        )
        try:
            for record in records:
                line = _text(record.value)
                if print_key:
                    line = f"{_text(record.key)}{key_separator}{line}"
                click.echo(line)
                count += 1
        except KeyboardInterrupt:
            pass
    err.print(f"consumed {count} record(s)")
