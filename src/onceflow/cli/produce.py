"""``onceflow produce``: stdin lines to records, like Kafka's console producer."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from onceflow.cli.common import bootstrap_option, client_security, err, friendly_errors
from onceflow.client.simple import SimpleClient

ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def lines_to_records(lines, key_separator: str | None) -> Iterator[tuple[bytes | None, bytes]]:
    """One record per line (the newline dropped); with a separator, the text before its first
    occurrence is the key. A line without the separator is an error, as in Kafka's console producer."""
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\r\n")
        if key_separator is None:
            yield None, text.encode("utf-8")
            continue
        key, sep, value = text.partition(key_separator)
        if not sep:
            raise click.ClickException(f"line {number} has no key separator {key_separator!r}: {text[:60]!r}")
        yield key.encode("utf-8"), value.encode("utf-8")


@click.command()
@click.option("--topic", required=True)
@click.option("--key-separator", default=None, help="Split each line into KEY<SEP>VALUE.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none")
@click.option("--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True)
@click.option("--partition", type=click.IntRange(0), default=None, help="Send everything to this partition.")
@bootstrap_option
def produce(topic, key_separator, compression, acks, partition, bootstrap):
    """Send each line of stdin as a record to TOPIC."""
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        results = client.produce(
            topic,
            lines_to_records(sys.stdin, key_separator),
            partition=partition,
            acks=ACKS[acks],
            compression=compression,
        )
    count = sum(n for _p, _result, n in results)
    err.print(f"produced {count} record(s) to {topic}")
