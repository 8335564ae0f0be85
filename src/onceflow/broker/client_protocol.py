"""The asyncio side of one client connection: reads into the sans-IO ``Connection``, runs one task per
request, writes the answers in request order.

A ``BufferedProtocol`` rather than streams: the event loop reads straight into the connection's
buffers (see ``connection``), and a response is written from the request task's done callback, not
by a writer task woken through a queue, so a request costs one task and no extra event-loop hops.

Ordering: tasks are created in request order and the loop starts them in that order, so a handler
that changes state before its first ``await`` (Produce) applies pipelined requests in order; answers
leave strictly in request order because only the head of ``_pending`` is ever written.

Backpressure: with ``MAX_QUEUED_REQUESTS`` requests unanswered, or while the transport's write buffer
is above its high-water mark (``pause_writing``), we stop reading and stop writing further answers;
both resume as the client reads. A handler returning ``None`` sends nothing (acks=0 produce,
dropped-response fault); raising ``CloseConnection`` closes the connection (Kafka's answer to a failed
acks=0 produce, the disconnect fault); any other exception is a handler bug: logged, connection closed
(the client reconnects). An undecodable frame or the peer's EOF closes the connection too; requests
still running are cancelled and nothing more is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from onceflow.broker.connection import (
    NEED_DATA,
    Connection,
    ConnectionBroken,
    RequestReceived,
    SupportedApi,
    UnsupportedApiVersionsRequest,
)
from onceflow.broker.context import CloseConnection
from onceflow.protocol import apis

log = logging.getLogger(__name__)

# Requests read ahead of their responses on one connection; beyond this we stop reading.
MAX_QUEUED_REQUESTS = 512
API_VERSIONS_KEY = 18

Dispatch = Callable[[RequestReceived], Coroutine[Any, Any, "bytes | bytearray | None"]]


class ClientProtocol(asyncio.BufferedProtocol):
    """One accepted connection. ``closed`` is a future done once the transport is gone."""

    def __init__(
        self,
        dispatch: Dispatch,
        supported: Mapping[int, SupportedApi],
        *,
        max_request_bytes: int,
        on_close: Callable[[ClientProtocol], None],
    ) -> None:
        self._dispatch = dispatch
        self._supported = supported
        self._connection = Connection(supported, max_request_bytes=max_request_bytes)
        self._on_close = on_close
        self._transport: Any = None
        self._peer: Any = None
        # Unanswered requests in request order: a task, or an answer already known (bytes).
        self._pending: deque[asyncio.Task | bytes | bytearray] = deque()
        self._reading_paused = False
        self._writing_paused = False
        self._closing = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio callbacks ---------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        # Any: uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # asyncio and uvloop set it already; a small answer held back by Nagle's algorithm behind
            # the client's delayed ACK would cost ~40 ms per EndTxn, so make sure.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._connection.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._connection.buffer_updated(nbytes)
        self._read_events()

    def eof_received(self) -> bool:
        log.debug("connection from %s: end of stream", self._peer)
        self.abort()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection from %s ended: %r", self._peer, exc)
        self._closing = True
        for item in self._pending:
            if not isinstance(item, asyncio.Task):
                continue
            if not item.done():
                item.cancel()
            elif not item.cancelled():
                item.exception()  # finished but never to be written: no "never retrieved" noise
        self._pending.clear()
        self._on_close(self)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._write_ready()
        self._read_events()

    # -- ours ----------------------------------------------------------------------------------------

    def abort(self) -> None:
        """Close at once, dropping unwritten answers (as Kafka closes a channel)."""
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def _read_events(self) -> None:
        """Start a task for each complete request while there is room, then pause or resume reading."""
        connection = self._connection
        while not self._closing and len(self._pending) < MAX_QUEUED_REQUESTS:
            event = connection.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, ConnectionBroken):
                log.warning("closing connection from %s: %s", self._peer, event.reason)
                self.abort()
                return
            if isinstance(event, UnsupportedApiVersionsRequest):
                api = self._supported[API_VERSIONS_KEY]
                self._pending.append(
                    apis.unsupported_api_versions_response(
                        event.correlation_id, api.min_version, api.max_version
                    )
                )
                self._write_ready()
                continue
            assert isinstance(event, RequestReceived)
            task = asyncio.ensure_future(self._dispatch(event))
            task.add_done_callback(self._request_done)
            self._pending.append(task)
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closing or self._transport is None:
            return
        stop = self._writing_paused or len(self._pending) >= MAX_QUEUED_REQUESTS
        if stop and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif not stop and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _request_done(self, _task: asyncio.Task) -> None:
        if self._closing:
            return
        was_full = len(self._pending) >= MAX_QUEUED_REQUESTS
        self._write_ready()
        if was_full:
            self._read_events()  # requests read but not started while the queue was full

    def _write_ready(self) -> None:
        """Write the answers at the head of the queue that are ready, in order."""
        pending = self._pending
        transport = self._transport
        while pending and not self._writing_paused and not self._closing:
            head = pending[0]
            if isinstance(head, asyncio.Task):
                if not head.done():
                    return
                pending.popleft()
                try:
                    response = head.result()
                except asyncio.CancelledError:
                    self.abort()
                    return
                except CloseConnection as exc:
                    log.info("closing the connection from %s: %s", self._peer, exc)
                    self.abort()
                    return
                except Exception:
                    # A handler bug: Kafka would send a generic error; we close, the client reconnects.
                    log.exception("request from %s failed; closing the connection", self._peer)
                    self.abort()
                    return
            else:
                response = pending.popleft()
            if response is not None and transport is not None:
                transport.write(response)
