"""``onceflow consume``: print a topic's records, like Kafka's console consumer.

Without ``--group`` it reads every partition through :class:`SimpleClient`. With ``--group`` it is a
member of a consumer group (the blocking :class:`~onceflow.client.Consumer`): the group hands out the
partitions and the offsets of the printed records are committed, so the group's next run continues
after the last record printed.
"""

from __future__ import annotations

import signal
import threading
import time

import click

from onceflow.cli.common import bootstrap_option, client_security, err, friendly_errors
from onceflow.client.simple import SimpleClient
from onceflow.protocol.errors import KafkaError

# How long one poll waits for records in group mode: the longest a first Ctrl-C waits to be noticed
# while the group is quiet (a rebalance in progress can hold a poll longer).
_POLL_MS = 500


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _line(record, print_key: bool, key_separator: str) -> str:
    line = _text(record.value)
    if print_key:
        line = f"{_text(record.key)}{key_separator}{line}"
    return line


@click.command()
@click.option("--topic", required=True)
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Start at the earliest offset, not the end (with --group: only where the group has no "
    "committed offset).",
)
@click.option(
    "--group",
    metavar="GROUP",
    default=None,
    help="Consume as a member of this consumer group: the group assigns the partitions and the "
    "offsets of the printed records are committed, so the next run continues after them.",
)
@click.option(
    "--group-protocol",
    type=click.Choice(["classic", "consumer"]),
    default=None,
    show_default="classic",
    help="The group protocol with --group: classic (JoinGroup/SyncGroup) or consumer (KIP-848).",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option("--max-messages", type=click.IntRange(1), default=None, help="Stop after this many records.")
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=None,
    help="Stop after this many seconds without records (with --group: counted from joining the group).",
)
@click.option("--print-key", is_flag=True, help="Print KEY<SEP>VALUE.")
@click.option("--key-separator", default="\t", show_default="tab")
@bootstrap_option
def consume(
    topic,
    from_beginning,
    group,
    group_protocol,
    isolation_level,
    max_messages,
    timeout,
    print_key,
    key_separator,
    bootstrap,
):
    """Print the values of TOPIC's records, one a line (Ctrl-C stops)."""
    if group is None:
        if group_protocol is not None:
            raise click.UsageError("--group-protocol needs --group")
        _consume_partitions(
            topic, from_beginning, isolation_level, max_messages, timeout, print_key, key_separator, bootstrap
        )
        return
    if not group.strip():
        raise click.BadParameter("must not be empty", param_hint="--group")
    _consume_group(
        topic,
        group,
        group_protocol or "classic",
        from_beginning,
        isolation_level,
        max_messages,
        timeout,
        print_key,
        key_separator,
        bootstrap,
    )


def _consume_partitions(
    topic, from_beginning, isolation_level, max_messages, timeout, print_key, key_separator, bootstrap
) -> None:
    count = 0
    with friendly_errors(bootstrap), SimpleClient(bootstrap, security=client_security()) as client:
        records = client.consume(
            topic,
            from_beginning=from_beginning,
            isolation_level=isolation_level,
            max_messages=max_messages,
            timeout_s=timeout,
        )
        try:
            for record in records:
                click.echo(_line(record, print_key, key_separator))
                count += 1
        except KeyboardInterrupt:
            pass
    err.print(f"consumed {count} record(s)")


class _Interrupts:
    """Ctrl-C in group mode: the first one asks the consume loop to stop after the record being
    printed (so the printed records are committed and the member leaves the group); a second one
    raises KeyboardInterrupt at once, wherever the command is."""

    def __init__(self) -> None:
        self.stop_requested = False
        self._installed = False
        self._previous = None

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():  # signal handlers live there only
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info) -> None:
        if self._installed:
            signal.signal(
                signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler
            )

    def _handle(self, signum, frame) -> None:
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested = True


def _consume_group(
    topic,
    group,
    group_protocol,
    from_beginning,
    isolation_level,
    max_messages,
    timeout,
    print_key,
    key_separator,
    bootstrap,
) -> None:
    from onceflow.client.connection import BrokerConnectionError
    from onceflow.client.consumer import Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "client.id": "onceflow-console-consumer",
        "group.id": group,
        "group.protocol": group_protocol,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "isolation.level": isolation_level,
        # Positions run ahead of what was printed (a poll's records, or Ctrl-C in the middle of
        # them): commit exactly the printed records instead, below.
        "enable.auto.commit": False,
        **(security.as_settings() if (security := client_security()) is not None else {}),
    }
    count = 0
    uncommitted = 0  # printed records whose offsets the group refused or did not get

    def commit(consumer: Consumer, offsets: dict, printed: int) -> None:
        nonlocal uncommitted
        if not offsets:
            return
        try:
            consumer.commit(offsets)
        except KafkaError as exc:
            uncommitted += printed
            reason = str(exc) if isinstance(exc, BrokerConnectionError) else exc.code.name
            err.print(
                f"warning: could not commit {printed} printed record(s) to group {group!r} ({reason}); "
                "they may be printed again",
                markup=False,
            )

    with friendly_errors(bootstrap):
        with SimpleClient(bootstrap, security=client_security()) as client:
            client.describe_topic(topic)  # a missing topic is an error, as without --group
        with _Interrupts() as interrupts:
            consumer = Consumer(topic, config=config)
            try:
                idle_since = None  # set once the consumer has joined the group
                while not interrupts.stop_requested and (max_messages is None or count < max_messages):
                    wait_ms = _POLL_MS
                    if timeout is not None and idle_since is not None:
                        left = timeout - (time.monotonic() - idle_since)
                        if left <= 0:
                            break
                        wait_ms = min(_POLL_MS, max(1, int(left * 1000)))
                    records = consumer.poll(
                        timeout_ms=wait_ms,
                        max_records=None if max_messages is None else max_messages - count,
                    )
                    # Polls keep to their timeout, so a join can take several: --timeout starts once in.
                    if idle_since is None and (records or consumer.group_metadata().generation_id > 0):
                        idle_since = time.monotonic()
                    offsets: dict[TopicPartition, int] = {}  # the next offset to read, per partition
                    printed = 0
                    wanted = len(records) if max_messages is None else max_messages - count
                    try:
                        for record in records:
                            if interrupts.stop_requested or printed == wanted:
                                break
                            click.echo(_line(record, print_key, key_separator))
                            offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
                            printed += 1
                    finally:
                        # Before the next poll, which may hand these partitions to another member.
                        count += printed
                        commit(consumer, offsets, printed)
                    if printed:
                        idle_since = time.monotonic()
            finally:
                consumer.close(autocommit=False)
    err.print(f"consumed {count} record(s)")
    if uncommitted:
        raise click.ClickException(
            f"{uncommitted} printed record(s) were not committed to group {group!r}; "
            "its next run may print them again"
        )
