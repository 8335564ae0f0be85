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


class BadValue(click.BadParameter):
    """A value onceflow refuses in a well-formed command line (an unknown ``--config`` setting, a number
    that is not one, an unreadable file): click's ``BadParameter`` (exit code 2, ``Error: Invalid value
    for ...``) shown as that one line only, without click's usage lines, which belong to real usage
    errors (an unknown option, a missing argument) and only push the line that matters out of sight."""

    def show(self, file=None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file, err=file is None)


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


_SECURITY = "onceflow.security"


def _read_command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    if path is None:
        return
    from onceflow.client.security import ClientSecurity, is_security_setting
    from onceflow.protocol.errors import InvalidConfig

    try:
        settings = read_properties(path)
    except OSError as exc:
        raise BadValue(f"cannot read {path}: {exc.strerror or exc}", param_hint="--command-config")
    except ValueError as exc:
        raise BadValue(str(exc), param_hint="--command-config")
    chosen = {k: v for k, v in settings.items() if is_security_setting(k)}
    try:
        ClientSecurity.from_config(chosen)  # refuse a bad file before connecting
    except InvalidConfig as exc:
        raise BadValue(f"{path}: {exc}", param_hint="--command-config")
    ctx.meta[_SECURITY] = chosen


def bootstrap_option(command):
    """``--bootstrap-server`` (the broker), and ``--command-config FILE``, as Kafka's tools: a properties
    file of client settings, the TLS and SASL ones (``security.protocol``, ``sasl.mechanism``,
    ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ... or Java's ``sasl.jaas.config``)."""
    command = click.option(
        "--command-config",
        type=click.Path(dir_okay=False),
        expose_value=False,
        is_eager=True,
        callback=_read_command_config,
        metavar="FILE",
        help="Client settings (TLS, SASL) in a properties file, as Kafka's tools take.",
    )(command)
    return click.option(
        "--bootstrap-server",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        metavar="HOST:PORT",
        help="Broker to connect to.",
    )(command)


def security_settings() -> dict[str, str]:
    """The TLS/SASL settings of ``--command-config`` (Kafka names), for producer and consumer configs."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_SECURITY, {})) if ctx is not None else {}


def client_security():
    """``--command-config``'s settings as a ``ClientSecurity`` (None: connect in plain text)."""
    from onceflow.client.security import ClientSecurity

    return ClientSecurity.from_config(security_settings())


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments, a trailing
    backslash continuing a line. ValueError names the line that is neither."""
    result: dict[str, str] = {}
    pending = ""
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = pending + raw.strip()
            if line.endswith("\\"):  # continued on the next line
                pending = line[:-1]
                continue
            pending = ""
            if not line or line[0] in "#!":
                continue
            key, sep, value = _split_property(line)
            if not sep:
                raise ValueError(f"{path}:{number}: {line!r} is not key=value")
            result[key] = value
    return result


def _split_property(line: str) -> tuple[str, str, str]:
    for i, ch in enumerate(line):
        if ch in "=:":
            return line[:i].strip(), ch, line[i + 1 :].strip()
    return line, "", ""


def parse_key_values(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    """``("a=1", "b=2")`` to ``{"a": "1", "b": "2"}``; a pair without ``=`` is a usage error."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadValue(f"{pair!r} is not KEY=VALUE", param_hint=what)
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
