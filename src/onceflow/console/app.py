"""The console's web app: Starlette routes rendering Jinja2 templates, one admin connection per page.

Every page opens an :class:`AsyncAdminClient` (or a plain client for the message browser), reads what
it shows and closes it, so a broker that goes away and comes back needs nothing from the console.
Failures become pages, never tracebacks: an unknown topic or group 404, bad query input 400,
writes while read-only 403, an unreachable broker 503, an error the broker answered 502, anything
else 500 (and logged). Writes (aborting a hanging transaction, resetting a group's offsets) exist
only with ``allow_writes`` and go through a confirmation form.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from jinja2 import select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from onceflow.client.admin import AsyncAdminClient
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AsyncClient
from onceflow.client.connection import BrokerConnectionError
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.security import ClientSecurity
from onceflow.console import browse, cluster
from onceflow.console.metrics_feed import MetricsFeed
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ConsoleSettings:
    bootstrap: str = "127.0.0.1:9092"
    metrics_url: str | None = None
    metrics_interval_s: float = 5.0
    allow_writes: bool = False
    request_timeout_ms: int = 10_000
    max_transaction_timeout_ms: int = cluster.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    security: ClientSecurity | None = None  # TLS/SASL settings (--command-config)


class ConsoleError(Exception):
    """An error page with its HTTP status."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


def create_app(settings: ConsoleSettings) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.autoescape = select_autoescape(default=True)
    templates.env.filters["time"] = browse.format_time
    templates.env.filters["size"] = _size
    templates.env.filters["duration"] = _duration
    feed = MetricsFeed(settings.metrics_url, settings.metrics_interval_s) if settings.metrics_url else None

    def render(request: Request, name: str, status: int = 200, **context) -> Response:
        context.update(settings=settings, feed=feed, path=request.url.path)
        return templates.TemplateResponse(request, name, context, status_code=status)

    @contextlib.asynccontextmanager
    async def admin() -> AsyncIterator[AsyncAdminClient]:
        client = AsyncAdminClient(
            settings.bootstrap,
            client_id="onceflow-console",
            request_timeout_ms=settings.request_timeout_ms,
            security=settings.security,
        )
        try:
            await client.__aenter__()
            yield client
        finally:
            await client.close()

    def require_writes(what: str) -> None:
        if not settings.allow_writes:
            raise ConsoleError(
                403,
                "Read-only console",
                f"{what} changes the cluster; start the console with --allow-writes to allow it",
            )

    # -- pages -------------------------------------------------------------------------------------

    async def index(request: Request) -> Response:
        async with admin() as a:
            info = await cluster.overview(a)
        return render(request, "index.html", overview=info)

    async def topics(request: Request) -> Response:
        async with admin() as a:
            rows, notes = await cluster.topics(a)
        return render(request, "topics.html", topics=rows, notes=notes)

    async def topic(request: Request) -> Response:
        name = request.path_params["name"]
        async with admin() as a:
            info = await cluster.describe_topic(a, name)
            partitions, notes = await cluster.topic_partitions(a, info)
            configs, config_notes = await cluster.topic_configs(a, name)
        return render(
            request,
            "topic.html",
            topic=info,
            partitions=partitions,
            configs=configs,
            notes=notes + config_notes,
        )

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        async with admin() as a:
            info = await cluster.describe_topic(a, name)
        try:
            query = browse.parse_query(request.query_params, len(info.partitions))
        except browse.BadInput as exc:
            raise ConsoleError(400, "Bad request", str(exc)) from None
        client = AsyncClient(
            settings.bootstrap,
            client_id="onceflow-console",
            request_timeout_s=settings.request_timeout_ms / 1000,
            security=settings.security,
        )
        try:
            page = await browse.browse(client, name, query)
        finally:
            await client.close()
        return render(request, "messages.html", topic=info, page=page, formats=browse.FORMATS)

    async def producers(request: Request) -> Response:
        name = request.path_params["name"]
        async with admin() as a:
            info = await cluster.describe_topic(a, name)
            by_partition = await cluster.producers(a, info)
        return render(request, "producers.html", topic=info, producers=by_partition, now=cluster.now_ms())

    async def groups(request: Request) -> Response:
        async with admin() as a:
            rows = await cluster.groups(a)
        return render(request, "groups.html", groups=rows)

    async def group(request: Request) -> Response:
        group_id = request.path_params["group_id"]
        async with admin() as a:
            description, rows = await cluster.describe_group(a, group_id)
            topics = sorted((await a.describe_topics()).keys())
        return render(
            request,
            "group.html",
            group=description,
            rows=rows,
            topics=topics,
            message=request.query_params.get("message", ""),
        )

    async def reset_offsets(request: Request) -> Response:
        group_id = request.path_params["group_id"]
        require_writes("Resetting a group's offsets")
        form = await _form(request)
        topic_name, mode = form.get("topic", ""), form.get("mode", "")
        if mode not in ("earliest", "latest", "offset"):
            raise ConsoleError(400, "Bad request", "mode must be earliest, latest or offset")
        target = None
        if mode == "offset":
            try:
                target = int(form.get("offset", ""))
            except ValueError:
                raise ConsoleError(400, "Bad request", "offset must be a whole number") from None
        async with admin() as a:
            state = (await a.describe_group(group_id)).state
            if state not in ("Empty", "Dead"):
                raise ConsoleError(
                    409,
                    "Group is active",
                    f"group {group_id} is {state}: stop its consumers before resetting",
                )
            info = await cluster.describe_topic(a, topic_name)
            tps = [TopicPartition(topic_name, p) for p in sorted(info.partitions)]
            start = await a.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
            end = await a.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))
            chosen = {"earliest": start, "latest": end}.get(mode)
            plan = {
                tp: min(max(chosen[tp] if chosen is not None else target, start[tp]), end[tp]) for tp in tps
            }
            await a.alter_group_offsets(group_id, plan)
        message = f"offsets of {topic_name} reset to {mode if target is None else target}"
        return RedirectResponse(f"/groups/{group_id}?{urlencode({'message': message})}", status_code=303)

    async def transactions(request: Request) -> Response:
        async with admin() as a:
            rows, hanging, notes = await cluster.transactions(a, settings.max_transaction_timeout_ms)
        return render(
            request,
            "transactions.html",
            transactions=rows,
            hanging=hanging,
            notes=notes,
            now=cluster.now_ms(),
            message=request.query_params.get("message", ""),
        )

    async def abort(request: Request) -> Response:
        require_writes("Aborting a transaction")
        params = request.query_params if request.method == "GET" else await _form(request)
        try:
            topic_name = params["topic"]
            partition = int(params["partition"])
            producer_id = int(params["producer_id"])
            producer_epoch = int(params["producer_epoch"])
            coordinator_epoch = int(params.get("coordinator_epoch") or 0)
            start_offset = int(params.get("start_offset") or -1)
        except (KeyError, ValueError):
            raise ConsoleError(
                400,
                "Bad request",
                "an abort needs topic, partition, producer_id and producer_epoch (whole numbers)",
            ) from None
        target = dict(
            topic=topic_name,
            partition=partition,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            start_offset=start_offset,
        )
        if request.method == "GET":
            return render(request, "abort.html", target=target)
        async with admin() as a:
            await a.abort_transaction(
                TopicPartition(topic_name, partition), producer_id, producer_epoch, max(coordinator_epoch, 0)
            )
        message = f"aborted the transaction of producer {producer_id} (epoch {producer_epoch}) in {topic_name}-{partition}"
        return RedirectResponse(f"/transactions?{urlencode({'message': message})}", status_code=303)

    async def charts(request: Request) -> Response:
        return render(request, "charts.html")

    async def series(request: Request) -> Response:
        if feed is None:
            return JSONResponse({"error": "no metrics endpoint: start the console with --metrics-url"}, 404)
        return JSONResponse(feed.series())

    # -- errors --------------------------------------------------------------------------------------

    def error_page(request: Request, status: int, title: str, message: str) -> Response:
        return render(request, "error.html", status=status, title=title, message=message)

    async def on_console_error(request: Request, exc: ConsoleError) -> Response:
        return error_page(request, exc.status, exc.title, exc.message)

    async def on_kafka_error(request: Request, exc: KafkaError) -> Response:
        if isinstance(exc, BrokerConnectionError):
            return error_page(request, 503, "Broker unreachable", f"cannot reach {settings.bootstrap}: {exc}")
        if isinstance(exc, cluster.NotFound) or exc.code in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.GROUP_ID_NOT_FOUND,
            ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
        ):
            return error_page(request, 404, "Not found", str(exc))
        if exc.code == ErrorCode.INVALID_TOPIC_EXCEPTION:
            return error_page(request, 400, "Bad request", str(exc))
        return error_page(request, 502, "The broker answered with an error", f"{exc.code.name}: {exc}")

    async def on_http_error(request: Request, exc: HTTPException) -> Response:
        titles = {404: "Not found", 405: "Method not allowed"}
        return error_page(request, exc.status_code, titles.get(exc.status_code, "Error"), exc.detail or "")

    async def on_os_error(request: Request, exc: OSError) -> Response:
        return error_page(request, 503, "Broker unreachable", f"cannot reach {settings.bootstrap}: {exc}")

    async def on_other_error(request: Request, exc: Exception) -> Response:
        # Starlette's last resort: the page is sent, then the exception goes on to the server's log.
        log.exception("console page %s failed", request.url.path)
        return error_page(
            request, 500, "Internal error", f"{type(exc).__name__}: {exc} (details in the console's log)"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if feed is not None:
            feed.start()
        try:
            yield
        finally:
            if feed is not None:
                await feed.stop()

    routes = [
        Route("/", index),
        Route("/topics", topics),
        Route("/topics/{name}", topic),
        Route("/topics/{name}/messages", messages),
        Route("/topics/{name}/producers", producers),
        Route("/groups", groups),
        Route("/groups/{group_id}", group),
        Route("/groups/{group_id}/reset-offsets", reset_offsets, methods=["POST"]),
        Route("/transactions", transactions),
        Route("/transactions/abort", abort, methods=["GET", "POST"]),
        Route("/charts", charts),
        Route("/api/series", series),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={
            ConsoleError: on_console_error,
            KafkaError: on_kafka_error,
            HTTPException: on_http_error,
            OSError: on_os_error,
            Exception: on_other_error,
        },
        lifespan=lifespan,
    )


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each)."""
    body = (await request.body()).decode("utf-8", "replace")
    return {key: values[0] for key, values in parse_qs(body).items()}


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
