"""``onceflow serve``: run a node (a broker, a controller, or both) in the foreground until Ctrl-C /
SIGTERM.

Settings use Kafka's names, from ``--config KEY=VALUE`` and ``--config-file server.properties``
(``--config`` wins). With no ``process.roles`` the node is a single broker that is its own controller,
as ``onceflow serve`` has always been; ``--host``/``--port`` are shorthands for its ``listeners``.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
from pathlib import Path

import click

from onceflow.cli.common import BadValue, parse_key_values

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def broker_config(host: str, port: int, data_dir: Path, faults: dict[str, str], overrides: dict[str, str]):
    """A ``BrokerConfig`` from the command line; ``overrides`` use Kafka's names (``num.partitions``).
    Security settings (``ssl.*``, ``sasl.*``, ``listener.name.*``, the authorizer's) go to
    ``BrokerConfig.security``, checked against the node's listeners by ``server.security``."""
    from onceflow.broker.config import BrokerConfig  # lazily: the CLI must load without the broker
    from onceflow.broker.security.config import is_security_key

    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    security = {name: raw for name, raw in overrides.items() if is_security_key(name)}
    kwargs: dict = {"host": host, "port": port, "data_dir": data_dir, "security": security}
    reserved = ("faults", "data_dir", "host", "port", "security")
    for name, raw in _in_milliseconds({k: v for k, v in overrides.items() if k not in security}).items():
        field_name = name.replace(".", "_").replace("-", "_")
        if field_name not in fields or field_name in reserved:
            if name in NO_EFFECT:
                continue
            raise BadValue(_unknown_config(name, fields), param_hint="--config")
        default = getattr(BrokerConfig(), field_name)
        kwargs[field_name] = _convert(raw, type(default), name)
    try:
        kwargs["faults"] = {name: float(value) for name, value in faults.items()}
    except ValueError:
        raise BadValue(
            "fault probabilities must be numbers, e.g. drop-response-after-append=0.1", param_hint="--fault"
        )
    try:
        return BrokerConfig(**kwargs)
    except ValueError as exc:  # a value out of range, e.g. transaction.version=3
        raise BadValue(str(exc), param_hint="--config")


# Kafka broker settings that a Kafka server.properties (Kafka's own sample files among them) sets and
# that mean nothing to onceflow: accepted, so such a file runs as it is, and named once in the log.
NO_EFFECT = {
    "num.network.threads": "one event loop serves every connection",
    "num.io.threads": "one event loop serves every request",
    "num.recovery.threads.per.data.dir": "logs are recovered one by one",
    "num.replica.fetchers": "partitions are not replicated yet",
    "background.threads": "one event loop",
    "socket.send.buffer.bytes": "the kernel's socket buffer sizes are used",
    "socket.receive.buffer.bytes": "the kernel's socket buffer sizes are used",
    "offsets.topic.replication.factor": "internal topics have one replica until partitions are replicated",
    "transaction.state.log.replication.factor": "internal topics have one replica until partitions are replicated",
    "transaction.state.log.min.isr": "internal topics have one replica until partitions are replicated",
    "share.coordinator.state.topic.replication.factor": "no share groups",
    "share.coordinator.state.topic.min.isr": "no share groups",
    "log.flush.offset.checkpoint.interval.ms": "offsets are checkpointed on their own schedule",
}


def no_effect_settings(overrides: dict[str, str]) -> list[str]:
    """The settings of ``overrides`` that are accepted with no effect (see :data:`NO_EFFECT`)."""
    from onceflow.broker.config import BrokerConfig

    fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    return sorted(n for n in overrides if n in NO_EFFECT and n.replace(".", "_") not in fields)


def _unknown_config(name: str, fields) -> str:
    """One line for a setting onceflow does not know: the nearest known name when one is close (a
    typo), else where the known ones are listed."""
    import difflib

    from onceflow.server.config import SERVER_KEYS

    known = {
        n.replace("_", ".") for n in fields if n not in ("faults", "data_dir", "host", "port", "security")
    }
    known |= set(SERVER_KEYS) | set(NO_EFFECT) | {"log.dirs", "log.dir"}
    known |= {coarse for synonyms in _TIME_SYNONYMS.values() for coarse, _unit in synonyms}
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    if close:
        return f"unknown broker config {name!r}; did you mean {close[0]!r}?"
    return (
        f"unknown broker config {name!r}: not a Kafka broker setting onceflow knows "
        f"({len(known)} are; `onceflow serve --help-configs` lists them)"
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
                raise BadValue(f"{name} must be an integer, not {raw!r}", param_hint="--config")
            result[ms_name] = str(value * unit_ms if value >= 0 else -1)
    return result


def _print_configs(ctx: click.Context) -> None:
    """``serve --help-configs``: every setting by its Kafka name, with its default."""
    from onceflow.broker.config import BrokerConfig
    from onceflow.server.config import SERVER_KEYS

    defaults = BrokerConfig()
    names = {
        f.name.replace("_", "."): getattr(defaults, f.name)
        for f in dataclasses.fields(BrokerConfig)
        if f.name not in ("faults", "data_dir", "host", "port", "security")
    }
    lines = [
        f"{name}={str(value).lower() if isinstance(value, bool) else value}" for name, value in names.items()
    ]
    lines += [f"{name}  (a node's setting: docs/cluster.md)" for name in SERVER_KEYS if name not in names]
    lines += ["controller.quorum.*  (the Raft quorum's timers: docs/cluster.md)", "log.dirs  (one directory)"]
    lines += [
        "ssl.*, sasl.*, listener.name.<listener>.*, authorizer.class.name, super.users, "
        "allow.everyone.if.no.acl.found, connections.max.reauth.ms  (TLS, SASL, ACLs: docs/security.md)"
    ]
    lines += [
        f"{coarse}  (sets {ms})" for ms, synonyms in _TIME_SYNONYMS.items() for coarse, _unit in synonyms
    ]
    lines += [f"{name}  (accepted, no effect: {why})" for name, why in NO_EFFECT.items()]
    click.echo("\n".join(sorted(lines)))
    ctx.exit(0)


def busy_listeners(listeners) -> list[str]:
    """The listeners (fixed ports only) that cannot be bound now, each with the reason (another
    process listens there, an address not of this host). Checked before the node writes anything,
    so that a port in use is one line, not a data dir made and a broker started and stopped."""
    busy = []
    for listener in listeners:
        if not listener.port:
            continue
        host = listener.host or "0.0.0.0"
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            # As the server's own listening socket: a port left in TIME_WAIT by a stopped broker is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, listener.port))
            except OSError as exc:
                busy.append(f"{listener}: {(exc.strerror or str(exc)).lower()}")
    return busy


def dev_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """``--dev``: no initial rebalance delay, unless the user set one explicitly."""
    return {"group.initial.rebalance.delay.ms": "0", **overrides}


def _convert(raw: str, kind: type, name: str):
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise BadValue(f"{name} must be true or false, not {raw!r}", param_hint="--config")
        return raw.lower() == "true"
    try:
        return kind(raw)
    except ValueError:
        kind_name = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
        raise BadValue(f"{name} must be {kind_name}, not {raw!r}", param_hint="--config")


@click.command()
@click.option("--host", default=None, help="Address to listen on (a single node; default 127.0.0.1).")
@click.option(
    "--port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Port to listen on (a single node; default 9092, 0 picks a free port).",
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
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A setting, Kafka's names.")
@click.option(
    "--config-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Settings in Kafka's server.properties format (--config overrides them).",
)
@click.option(
    "--dev",
    is_flag=True,
    help="Developer mode: group.initial.rebalance.delay.ms=0 (unless --config sets it), so a new group "
    "is formed at once instead of waiting Kafka's 3 s for more members.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (metrics.port; 0 picks a free port).",
)
@click.option("--verbose", is_flag=True, help="Debug logging.")
@click.option(
    "--help-configs",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _param, value: _print_configs(ctx) if value else None,
    help="List every setting --config takes, with its default, and exit.",
)
def serve(host, port, data_dir, faults, configs, config_file, dev, metrics_port, verbose):
    """Run a node in the foreground (Ctrl-C stops it cleanly): a single broker by default, or a
    broker and/or controller of a cluster (process.roles, node.id, controller.quorum.voters, listeners)."""
    from onceflow.server.config import ConfigError, server_config, split_properties
    from onceflow.server.properties import PropertiesError, read_properties

    properties: dict[str, str] = {}
    if config_file is not None:
        try:
            properties.update(read_properties(config_file))
        except PropertiesError as exc:
            raise BadValue(str(exc), param_hint="--config-file")
    properties.update(parse_key_values(configs, "--config"))
    if metrics_port is not None:
        properties["metrics.port"] = str(metrics_port)
    if "log.dirs" in properties or "log.dir" in properties:
        key = "log.dirs" if "log.dirs" in properties else "log.dir"
        dirs = [d for d in properties.pop(key).split(",") if d.strip()]
        if len(dirs) != 1:
            raise BadValue(
                f"{key}: onceflow keeps one data dir per node, not {len(dirs)}", param_hint="--config"
            )
        properties.pop("log.dir", None)
        data_dir = Path(dirs[0].strip())
    own, rest = split_properties(properties)
    try:
        server = server_config(own, host=host, port=port)
    except ConfigError as exc:
        raise BadValue(str(exc), param_hint="--config")
    overrides = dev_overrides(rest) if dev else rest
    first = server.broker_listeners()[0] if server.is_broker else None
    config = broker_config(
        first.host if first else "127.0.0.1",
        first.port if first else 0,
        data_dir,
        parse_key_values(faults, "--fault"),
        {**overrides, "node.id": str(server.node_id)},
    )
    from onceflow.server.security import node_security

    try:
        # TLS files, SASL users, the identity this node connects to others with, what a cluster refuses
        node_security(server, config.security)
    except ConfigError as exc:
        raise BadValue(str(exc), param_hint="--config")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, stream=sys.stderr
    )
    ignored = no_effect_settings(overrides)
    if ignored:
        logging.getLogger("onceflow.cli.serve").info(
            "accepted with no effect on onceflow: %s", ", ".join(f"{n} ({NO_EFFECT[n]})" for n in ignored)
        )
    busy = busy_listeners(server.listeners)
    if busy:
        raise click.ClickException(f"cannot serve on {'; '.join(busy)}")
    from onceflow.broker.data_dir_lock import DataDirError
    from onceflow.broker.metrics import MetricsEndpointError
    from onceflow.server.broker_lifecycle import RegistrationRefused
    from onceflow.server.node import run
    from onceflow.server.raft_quorum import QuorumUnavailable

    try:
        run(server, config)
    except (DataDirError, MetricsEndpointError, QuorumUnavailable, RegistrationRefused) as exc:
        raise click.ClickException(str(exc))
    except ValueError as exc:  # e.g. an unknown fault point name
        raise BadValue(str(exc), param_hint="--fault/--config")
    except OSError as exc:
        where = ", ".join(str(lst) for lst in server.listeners if lst.port)
        raise click.ClickException(f"cannot serve on {where or 'its listeners'}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass
