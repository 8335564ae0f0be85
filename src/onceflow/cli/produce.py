"""``onceflow produce``: stdin lines to records, like Kafka's console producer, with onceflow's
:class:`~onceflow.client.producer.sync.Producer`: idempotent by default (a producer id and sequence
numbers, so that a batch the producer retries is stored once), as Kafka 3's console producer."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from onceflow.cli.common import bootstrap_option, client_security, err, friendly_errors

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
@click.option(
    "--idempotence/--no-idempotence",
    default=None,
    help="Write with a producer id and sequence numbers, so that a retried batch is stored once "
    "(enable.idempotence). Default: on, unless --acks 0 or 1 (which it needs to be all).",
)
@bootstrap_option
def produce(topic, key_separator, compression, acks, partition, idempotence, bootstrap):
    """Send each line of stdin as a record to TOPIC."""
    from onceflow.client.producer.sync import Producer  # lazily: the CLI loads without the client
    from onceflow.client.simple import SimpleClient

    security = client_security()
    settings = {
        "bootstrap.servers": bootstrap,
        "client.id": "onceflow-console-producer",
        "acks": acks,
        "compression.type": compression,
        "enable.idempotence": idempotence,
        **(security.as_settings() if security is not None else {}),
    }
    with friendly_errors(bootstrap):
        # A broker that is not there or a topic that cannot be made is named at once (the producer
        # would wait max.block.ms for them); the topic is auto-created if the broker allows it.
        with SimpleClient(bootstrap, security=security) as client:
            client.topic_info(topic, auto_create=True)
        with Producer(settings) as producer:
            futures = [
                producer.send(topic, value, key, partition=partition)
                for key, value in lines_to_records(sys.stdin, key_separator)
            ]
            producer.flush()
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is not None:
            raise failed
    err.print(f"produced {len(futures)} record(s) to {topic}")
