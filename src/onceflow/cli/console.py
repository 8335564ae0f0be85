"""``onceflow console``: the web console (:mod:`onceflow.console`) on a local port.

Read-only unless ``--allow-writes``: then hanging transactions can be aborted and an empty group's
offsets reset from the pages. It binds to 127.0.0.1 by default; it has no login, so expose it
further (``--host 0.0.0.0``) only on a trusted network.
"""

from __future__ import annotations

import logging

import click

from onceflow.cli.common import bootstrap_option, client_security
from onceflow.client.async_client import parse_bootstrap


@click.command()
@bootstrap_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve the console on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="HTTP port.")
@click.option(
    "--metrics-url",
    default=None,
    metavar="URL",
    help="The broker's Prometheus endpoint (http://HOST:PORT/metrics) for throughput and lag charts.",
)
@click.option(
    "--metrics-interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.5),
    help="Seconds between two readings of --metrics-url.",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Allow aborting hanging transactions and resetting group offsets (read-only without it).",
)
@click.option(
    "--max-transaction-timeout-ms",
    default=900_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="An open transaction older than this counts as hanging (the broker's transaction.max.timeout.ms).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every request and debug details.")
def console(
    bootstrap, host, port, metrics_url, metrics_interval, allow_writes, max_transaction_timeout_ms, verbose
):
    """Serve the web console for the cluster at --bootstrap-server."""
    try:
        import uvicorn

        from onceflow.console import ConsoleSettings, create_app
    except ImportError as exc:
        raise click.ClickException(
            f"the console needs its extra dependencies ({exc.name} is missing): pip install 'onceflow[console]'"
        )
    try:
        parse_bootstrap(bootstrap)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--bootstrap-server")
    if metrics_url is not None and not metrics_url.startswith(("http://", "https://")):
        raise click.BadParameter("expected an http:// or https:// URL", param_hint="--metrics-url")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    settings = ConsoleSettings(
        bootstrap=bootstrap,
        metrics_url=metrics_url,
        metrics_interval_s=metrics_interval,
        allow_writes=allow_writes,
        max_transaction_timeout_ms=max_transaction_timeout_ms,
        security=client_security(),
    )
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="info" if verbose else "warning",
        access_log=verbose,
    )
    mode = "writes allowed" if allow_writes else "read-only"
    click.echo(f"onceflow console on http://{host}:{port} for {bootstrap} ({mode}); Ctrl-C stops it")
    uvicorn.Server(config).run()
