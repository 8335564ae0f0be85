"""Pieces every CLI command shares: the bootstrap option, ``key=value`` parsing, and turning errors
into one plain line (what went wrong, what to do) with a non-zero exit instead of a traceback."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

import click

from onceflow.protocol.errors import ErrorCode, KafkaError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
PIPED_WIDTH = 200  # columns of a table written to a pipe or a file


def __getattr__(name: str):
    # ``out`` and ``err`` (rich consoles) are made on first use: ``onceflow serve`` never needs rich,
    # and importing it would slow every broker start.
    if name in ("out", "err"):
        from rich.console import Console

        # Piped into grep or a file, rich would fit tables to 80 columns and cut their cells ("LastFetchTim…");
        # a terminal's own width is used as it is, and COLUMNS still wins.
        stream = sys.stderr if name == "err" else sys.stdout
        wide = None if stream.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
        console = Console(stderr=name == "err", highlight=False, soft_wrap=True, width=wide)
        globals()[name] = console
        return console
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


bootstrap_option = click.option(
    "--bootstrap-server",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT",
    help="Broker to connect to.",
)


def parse_key_values(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    """``("a=1", "b=2")`` to ``{"a": "1", "b": "2"}``; a pair without ``=`` is a usage error."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        result[key.strip()] = value.strip()
    return result


@contextlib.contextmanager
def friendly_errors(bootstrap: str | None = None) -> Iterator[None]:
    """Turn the errors a user can cause or fix into one-line messages (click exits with code 1)."""
    from onceflow.client.connection import BrokerConnectionError  # lazily: serve needs no client

    try:
        yield
    except BrokerConnectionError as exc:
        if str(exc).startswith("cannot connect"):
            raise click.ClickException(f"{exc}: is `onceflow serve` running?")
        raise click.ClickException(f"lost the connection to {bootstrap or 'the broker'}: {exc}")
    except KafkaError as exc:
        hint = _HINTS.get(exc.code, "")
        raise click.ClickException(f"{exc}{hint}")
    except (ValueError, OSError) as exc:
        logging.getLogger("onceflow.cli").debug("command failed", exc_info=True)
        raise click.ClickException(str(exc))


_HINTS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "; list topics with `onceflow topics list`",
    ErrorCode.TOPIC_ALREADY_EXISTS: "; pick another name or delete it first",
}
