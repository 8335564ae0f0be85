"""``onceflow serve``: run a broker in the foreground until Ctrl-C / SIGTERM."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import click

from onceflow.cli.common import parse_key_values

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def broker_config(
    host: str | None, port: int | None, data_dir: Path, faults: dict[str, str], overrides: dict[str, str]
):
    """A ``BrokerConfig`` from the command line; ``overrides`` use Kafka's names (``num.partitions``).
    Security settings (``listeners``, ``ssl.*``, ``sasl.*``, ``listener.name.*``, the authorizer's) go to
    ``BrokerConfig.security``; with ``listeners`` set, ``--host``/``--port`` are not used."""
    from onceflow.broker.config import BrokerConfig  # lazily: the CLI must load without the broker
    from onceflow.broker.security.config import is_security_key

    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    security = {name: raw for name, raw in overrides.items() if is_security_key(name)}
    if "listeners" in security:
        if host is not None or port is not None:
            raise click.BadParameter(
                "give either listeners or --host/--port, not both", param_hint="--config"
            )
        host, port = _first_listener(security["listeners"])
    kwargs: dict = {
        "host": host if host is not None else "127.0.0.1",
        "port": port if port is not None else 9092,
        "data_dir": data_dir,
        "security": security,
    }
    reserved = ("faults", "data_dir", "host", "port", "security")
    for name, raw in _in_milliseconds({k: v for k, v in overrides.items() if k not in security}).items():
        field_name = name.replace(".", "_").replace("-", "_")
        if field_name not in fields or field_name in reserved:
            settable = sorted(n.replace("_", ".") for n in fields if n not in reserved)
            raise click.BadParameter(
                f"unknown broker config {name!r}; known: {', '.join(settable)}", param_hint="--config"
            )
        default = getattr(BrokerConfig(), field_name)
        kwargs[field_name] = _convert(raw, type(default), name)
    try:
        kwargs["faults"] = {name: float(value) for name, value in faults.items()}
    except ValueError:
        raise click.BadParameter(
            "fault probabilities must be numbers, e.g. drop-response-after-append=0.1", param_hint="--fault"
        )
    try:
        return BrokerConfig(**kwargs)
    except ValueError as exc:  # a value out of range, e.g. transaction.version=3
        raise click.BadParameter(str(exc), param_hint="--config")


def _first_listener(text: str) -> tuple[str, int]:
    """The host and port of the first of ``listeners`` (what the broker's logs speak of); the full check
    is broker/security/config's."""
    first = text.split(",")[0].strip()
    _, _, address = first.partition("://")
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise click.BadParameter(
            f"listeners: {first!r} is not of the form NAME://host:port", param_hint="--config"
        )


# Kafka's coarser names for two broker times, in the order Kafka prefers them (ms, minutes, hours).
_TIME_SYNONYMS = {
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
}


def _in_milliseconds(overrides: dict[str, str]) -> dict[str, str]:
    """``log.retention.hours=24`` as ``log.retention.ms=86400000`` (a negative time: -1, for ever), and
    so on; an explicit ``.ms`` wins, as in Kafka."""
    result = dict(overrides)
    for ms_name, coarser in _TIME_SYNONYMS.items():
        for name, unit_ms in coarser:
            raw = result.pop(name, None)
            if raw is None or ms_name in result:
                continue
            try:
                value = int(raw)
            except ValueError:
                raise click.BadParameter(f"{name} must be an integer, not {raw!r}", param_hint="--config")
            result[ms_name] = str(value * unit_ms if value >= 0 else -1)
    return result


def dev_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """``--dev``: no initial rebalance delay, unless the user set one explicitly."""
    return {"group.initial.rebalance.delay.ms": "0", **overrides}


def _convert(raw: str, kind: type, name: str):
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise click.BadParameter(f"{name} must be true or false, not {raw!r}", param_hint="--config")
        return raw.lower() == "true"
    try:
        return kind(raw)
    except ValueError:
        kind_name = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
        raise click.BadParameter(f"{name} must be {kind_name}, not {raw!r}", param_hint="--config")


@click.command()
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1; or set listeners).")
@click.option(
    "--port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Port to listen on (default 9092, 0 picks a free port; or set listeners).",
)
@click.option(
    "--data-dir",
    default="./onceflow-data",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--fault", "faults", multiple=True, metavar="NAME=PROB", help="Switch on a fault point (tests, chaos)."
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Broker config, Kafka names.")
@click.option(
    "--dev",
    is_flag=True,
    help="Developer mode: group.initial.rebalance.delay.ms=0 (unless --config sets it), so a new group "
    "is formed at once instead of waiting Kafka's 3 s for more members.",
)
@click.option("--verbose", is_flag=True, help="Debug logging.")
def serve(host, port, data_dir, faults, configs, dev, verbose):
    """Run a broker in the foreground (Ctrl-C stops it cleanly)."""
    overrides = (
        dev_overrides(parse_key_values(configs, "--config")) if dev else parse_key_values(configs, "--config")
    )
    config = broker_config(host, port, data_dir, parse_key_values(faults, "--fault"), overrides)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, stream=sys.stderr
    )
    try:
        from onceflow.broker.server import run
    except ImportError as exc:
        raise click.ClickException(f"the broker is not available in this build: {exc}")
    from onceflow.broker.data_dir_lock import DataDirError

    try:
        run(config)
    except DataDirError as exc:
        raise click.ClickException(str(exc))
    except ValueError as exc:  # e.g. an unknown fault point name
        raise click.BadParameter(str(exc), param_hint="--fault/--config")
    except OSError as exc:
        where = config.security.get("listeners") or f"{config.host}:{config.port}"
        raise click.ClickException(f"cannot serve on {where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass
