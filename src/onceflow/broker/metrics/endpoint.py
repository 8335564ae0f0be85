"""``/metrics`` over HTTP: ``prometheus_client``'s own server (its text format, OpenMetrics when asked,
gzip) in a daemon thread, with the broker's families collected on the broker's event loop.

The request path's counters and the coordinators' state are only ever touched by the event loop, so a
scrape does not read them from the server's thread: it hands the collection to the loop
(``call_soon_threadsafe``) and waits for it, as for any other callback between two requests. The
process's metrics (CPU seconds, resident memory, open files: ``process_*``, and the interpreter's
``python_*``) come from ``prometheus_client``'s collectors in the server's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from onceflow.broker.metrics.errors import MetricsEndpointError

log = logging.getLogger(__name__)

COLLECT_TIMEOUT_S = 10.0  # a loop this late has worse problems; the scrape fails rather than hangs


class _OnLoop:
    """A collector whose ``collect`` runs ``collect_on_loop`` on ``loop`` and returns its families."""

    def __init__(self, loop: asyncio.AbstractEventLoop, collect_on_loop: Callable[[], list[Any]]) -> None:
        self._loop = loop
        self._collect = collect_on_loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread

    def collect(self) -> list[Any]:
        if threading.get_ident() == self._loop_thread:
            return self._collect()
        done: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(self._collect())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return done.result(timeout=COLLECT_TIMEOUT_S)


class MetricsEndpoint:
    """Serves ``http://host:port/metrics``; ``port`` 0 picks a free one (``self.port`` says which)."""

    def __init__(self, host: str, port: int, collect_on_loop: Callable[[], list[Any]]) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry()
        self.registry.register(_OnLoop(asyncio.get_running_loop(), collect_on_loop))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise MetricsEndpointError(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc} "
                "(choose another --metrics-port / metrics.port)"
            ) from exc
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._server = None
