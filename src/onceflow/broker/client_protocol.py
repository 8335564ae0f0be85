"""The asyncio side of one client connection: reads into the sans-IO ``Connection``, runs each request's
handler, writes the answers in request order.

A ``BufferedProtocol`` rather than streams: the event loop reads straight into the connection's
buffers (see ``connection``). Handlers start eagerly: each runs as soon as its request is read, up to
its first real suspension. Most never suspend (every log append is synchronous), so their answer is
written right away, with no task and no extra event-loop pass; a handler that does suspend continues
in a task, and its answer is written from the task's done callback, not by a writer task woken
through a queue.

Ordering: handlers start in request order, so a handler that changes state before its first
``await`` (Produce) applies pipelined requests in order; answers leave strictly in request order
because only the head of ``_pending`` is ever written.

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
import collections.abc
import contextlib
import logging
import socket
import sys
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


# Python 3.12+ starts a task eagerly itself (and then the handler runs inside a task, as
# asyncio.timeout needs); before, _start steps the coroutine by hand.
_EAGER_TASKS = sys.version_info >= (3, 12)


class _Resumed(collections.abc.Coroutine):
    """The rest of a coroutine whose first step already ran and yielded ``yielded`` (the future it
    waits for), as a coroutine a task can drive: the task's first step gets ``yielded``; everything
    after, a cancellation before that first step included, goes to the coroutine itself."""

    __slots__ = ("_coro", "_yielded", "_started")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded
        self._started = False

    def send(self, value: Any) -> Any:
        if not self._started:
            self._started = True
            yielded, self._yielded = self._yielded, None
            return yielded
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._started = True
        self._yielded = None
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __next__(self) -> Any:
        return self.send(None)

    def __await__(self) -> Any:
        return self


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
        # Unanswered requests in request order: a future (a task, or a handler's failure), or an
        # answer already known (bytes; None for a request answered with nothing).
        self._pending: deque[asyncio.Future | bytes | bytearray | None] = deque()
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
            if not isinstance(item, asyncio.Future):
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
        finished_now = False
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
            answer = self._start(event)
            self._pending.append(answer)
            if not isinstance(answer, asyncio.Future) or answer.done():
                finished_now = True
        if finished_now:
            self._write_ready()
        self._update_reading()

    def _start(self, event: RequestReceived) -> asyncio.Future | bytes | bytearray | None:
        """Run the request's handler up to its first real suspension, here and now (an "eager" start:
        most handlers never suspend, and then no task is made); a handler still running continues in
        a task. Returns the answer, or a future of it."""
        coro = self._dispatch(event)
        if _EAGER_TASKS:
            task = asyncio.Task(coro, eager_start=True)  # type: ignore[call-arg]
            if not task.done():
                task.add_done_callback(self._request_done)
            return task
        try:
            yielded = coro.send(None)
        except StopIteration as finished:
            return finished.value
        except (Exception, asyncio.CancelledError) as exc:
            failed = asyncio.get_running_loop().create_future()
            if isinstance(exc, asyncio.CancelledError):
                failed.cancel()
            else:
                failed.set_exception(exc)
            return failed
        task = asyncio.get_running_loop().create_task(_Resumed(coro, yielded))
        task.add_done_callback(self._request_done)
        return task

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

    def _request_done(self, _task: asyncio.Future) -> None:
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
            if isinstance(head, asyncio.Future):
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
