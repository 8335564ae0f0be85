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

Backpressure: with ``MAX_QUEUED_REQUESTS`` requests unanswered, with ``MAX_UNWRITTEN_ANSWER_BYTES`` of
answers made but not yet written, or while the transport's write buffer is above its high-water mark
(``pause_writing``), we stop reading and stop starting requests already read; all resume as the client
reads. Without the byte bound a client that pipelines fetches and never reads its answers made the
broker build every answer (up to fetch.max.bytes each) in memory: 100 fetches of a 60 MB topic held
2.7 GB. Kafka bounds it harder, reading one request per connection at a time.

Request memory (``queued.max.request.bytes``): the connection takes each request's buffer from the
broker's ``MemoryPool`` and gives it back when the request's handler has finished (or the connection
is lost). When the pool refuses, this connection stops reading and waits in the pool's queue; the pool
hands it the bytes as other requests finish, and reading resumes.

Client quotas: an answer the broker returns as a ``ThrottledAnswer`` is written at once, and the
connection is then muted for its throttle time (KIP-219): nothing is read or started until it passes.

Security (``broker/security``): TLS is the transport's (asyncio's SSL protocol reads and decrypts,
then hands the plaintext to this same buffered protocol; the plaintext path is unchanged). On an SSL
listener the client certificate's subject becomes the session's principal when the connection opens
(``certificate_principal``). On a SASL listener every request first goes to the connection's sans-IO
``SaslAuthenticator``, which passes it on, answers it itself (SaslHandshake, SaslAuthenticate), or
closes the connection; until authenticated a frame may be at most ``sasl.server.max.receive.size``. A
failed authentication is answered after ``connection.failed.authentication.delay.ms`` and the
connection closes after that answer, reading nothing more meanwhile.

Metrics (``broker/metrics``, only when the broker serves them): ``request_timer`` times each request
from the read that completed it to the write of its answer (Kafka's RequestMetrics times).

A handler returning ``None`` sends nothing (acks=0 produce, dropped-response fault); raising
``CloseConnection`` closes the connection (Kafka's answer to a failed acks=0 produce, the disconnect
fault); any other exception is a handler bug: logged, connection closed (the client reconnects). An undecodable frame or the peer's EOF closes the connection too; requests
still running are cancelled and nothing more is written.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import logging
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from onceflow.broker.connection import (
    NEED_DATA,
    NEED_MEMORY,
    Connection,
    ConnectionBroken,
    RequestReceived,
    SupportedApi,
    UnsupportedApiVersionsRequest,
)
from onceflow.broker.context import CloseConnection
from onceflow.broker.limit_events import FAILED_AUTHENTICATION, MEMORY_POOL_FULL, LimitEvents
from onceflow.broker.memory_pool import MemoryPool
from onceflow.broker.security.sasl_authenticator import PASS, Close, SaslAuthenticator
from onceflow.broker.security.session import Session
from onceflow.protocol import apis

log = logging.getLogger(__name__)

# Requests read ahead of their responses on one connection; beyond this we stop reading.
MAX_QUEUED_REQUESTS = 512
# Answers made and not yet written on one connection (besides the transport's own buffer); past this,
# no further request is started until the client reads. One answer may go past it (a whole fetch).
MAX_UNWRITTEN_ANSWER_BYTES = 32 * 1024 * 1024
API_VERSIONS_KEY = 18


class ThrottledAnswer:
    """An answer (or None: no answer) after which the connection stays muted for ``throttle_ms``
    (a client quota; KIP-219): neither reads nor starts requests until then. ``close_after``: the
    connection closes once it is written (a failed authentication)."""

    __slots__ = ("frame", "throttle_ms", "close_after")

    def __init__(self, frame: bytes | bytearray | None, throttle_ms: int, close_after: bool = False) -> None:
        self.frame = frame
        self.throttle_ms = throttle_ms
        self.close_after = close_after

    def __len__(self) -> int:
        return 0 if self.frame is None else len(self.frame)


Answer = bytes | bytearray | ThrottledAnswer | None
Dispatch = Callable[[RequestReceived], Coroutine[Any, Any, Answer]]


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
        pool: MemoryPool | None = None,
        limit_events: LimitEvents | None = None,
        on_open: Callable[[ClientProtocol], bool] | None = None,
        session: Session | None = None,
        authenticator: SaslAuthenticator | None = None,
        max_unauthenticated_bytes: int | None = None,
        certificate_principal: Callable[[dict | None], Any] | None = None,
        request_timer: Any = None,
    ) -> None:
        self._dispatch = dispatch
        self._supported = supported
        self._pool = pool if pool is not None else MemoryPool(-1)
        self._limit_events = limit_events if limit_events is not None else LimitEvents()
        self.session = session if session is not None else Session()
        self._authenticator = authenticator
        self._certificate_principal = certificate_principal
        self._max_request_bytes = max_request_bytes
        if authenticator is not None and max_unauthenticated_bytes is not None:
            max_request_bytes = min(max_request_bytes, max_unauthenticated_bytes)
        self._connection = Connection(supported, max_request_bytes=max_request_bytes, pool=self._pool)
        self._on_close = on_close
        self._on_open = on_open  # False: refused (a connection limit), closed before reading a byte
        self._transport: Any = None
        self._peer: Any = None
        # Unanswered requests in request order: a future (a task, or a handler's failure), or an
        # answer already known (bytes; None for a request answered with nothing).
        self._pending: deque[asyncio.Future | Answer] = deque()
        self._unwritten_bytes = 0  # of the answers in _pending that are made (see _answer_size)
        self._reading_paused = False
        self._writing_paused = False
        self._waiting_for_memory = False  # queued in the pool: reading stays paused until it grants
        self._in_read_events = False
        self._wanted_bytes = 0
        self._unmute: asyncio.TimerHandle | None = None  # set while muted for a throttle time
        self._closing = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # time.monotonic() of the last bytes read or answer written (connections.max.idle.ms).
        self.last_active = time.monotonic()
        self._read_at = self.last_active  # of the last bytes read: when the requests in them arrived
        self._request_timer = request_timer  # broker/metrics' RequestStats, or None
        self._timed_answers: dict[int, Any] = {}  # id(answer) -> its timing, until written

    # -- asyncio callbacks ---------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        # Any: uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        self.session.client_host = self.peer_address
        if self._on_open is not None and not self._on_open(self):
            self.abort()
            return
        if self._certificate_principal is not None:
            try:
                self.session.principal = self._certificate_principal(transport.get_extra_info("peercert"))
            except ValueError as exc:  # no ssl.principal.mapping.rules rule applies
                log.warning("closing the TLS connection from %s: %s", self._peer, exc)
                self.abort()
                return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # asyncio and uvloop set it already; a small answer held back by Nagle's algorithm behind
            # the client's delayed ACK would cost ~40 ms per EndTxn, so make sure.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._connection.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._read_at = time.monotonic()
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
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        if self._waiting_for_memory:
            self._pool.cancel(self._memory_granted)
            self._waiting_for_memory = False
        self._connection.close()  # requests handed out give theirs back as their tasks end
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

    @property
    def peer_address(self) -> str:
        """The client's IP address (as text), or "" where the transport has none."""
        return self._peer[0] if isinstance(self._peer, tuple) and self._peer else ""

    def idle_since(self) -> float | None:
        """When this connection last read or wrote, if it owes no answer now; None if it does."""
        return None if self._pending or self._closing else self.last_active

    def abort(self) -> None:
        """Close at once, dropping unwritten answers (as Kafka closes a channel)."""
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def _read_events(self) -> None:
        """Start each complete request while there is room, write what is answered, then pause or resume
        reading. Writing can make room again (answers leave), so it goes on until the buffered requests
        run out or room does: requests already read must never wait for more bytes from the client,
        which may be waiting for their answers."""
        self._in_read_events = True
        try:
            self._start_requests()
        finally:
            self._in_read_events = False
        self._update_reading()

    def _start_requests(self) -> None:
        connection = self._connection
        while True:
            finished_now = need_data = False
            while not self._closing and not self._waiting_for_memory and not self._holding_back():
                event = connection.next_event()
                if event is NEED_DATA:
                    need_data = True
                    break
                if event is NEED_MEMORY:
                    self._wait_for_memory()
                    continue  # granted at once, or the loop ends while we wait
                if isinstance(event, ConnectionBroken):
                    log.warning("closing connection from %s: %s", self._peer, event.reason)
                    self.abort()
                    return
                if isinstance(event, UnsupportedApiVersionsRequest):
                    api = self._supported[API_VERSIONS_KEY]
                    answer = apis.unsupported_api_versions_response(
                        event.correlation_id, api.min_version, api.max_version
                    )
                    self._unwritten_bytes += len(answer)
                    self._pending.append(answer)
                    self._write_ready()
                    continue
                assert isinstance(event, RequestReceived)
                if self._authenticator is not None and self._authenticate(event):
                    finished_now = True
                    continue
                answer = self._start(event)
                if isinstance(answer, asyncio.Future) and not answer.done():
                    if event.charged:
                        answer.add_done_callback(lambda _, charged=event.charged: self._pool.release(charged))
                else:
                    self._pool.release(event.charged)
                    finished_now = True
                    if type(answer) is ThrottledAnswer:
                        self._mute_for(answer.throttle_ms)
                self._unwritten_bytes += _answer_size(answer)
                self._pending.append(answer)
            if finished_now:
                self._write_ready()
            if need_data or self._closing or self._waiting_for_memory or self._holding_back():
                break

    def _authenticate(self, event: RequestReceived) -> bool:
        """Hand the request to the SASL authenticator first; True if it took it (answered it, or
        closed the connection), False to dispatch it as usual."""
        authenticator = self._authenticator
        assert authenticator is not None
        header = event.header
        now_ms = int(time.monotonic() * 1000)
        verdict = authenticator.receive(header.api_key, header.api_version, event.request, now_ms)
        if verdict is PASS:
            return False
        self._pool.release(event.charged)
        if isinstance(verdict, Close):
            log.info(
                "closing the connection from %s (listener %s): %s",
                self._peer,
                self.session.listener,
                verdict.reason,
            )
            self.abort()
            return True
        frame = apis.encode_response(verdict.response, header.correlation_id, header.api_version)
        if verdict.failed:
            # Counted, and logged at most once per interval: a password-guessing client must not
            # flood the log.
            self._limit_events.record(
                FAILED_AUTHENTICATION,
                "failed authentication from %s on listener %s (%s); connection closed",
                self.session.client_host,
                self.session.listener,
                verdict.reason,
            )
            self._fail_authentication(frame, authenticator.failed_delay_ms)
            return True
        if verdict.principal is not None and self.session.principal != verdict.principal:
            self.session.principal = verdict.principal
            self._connection.max_request_bytes = self._max_request_bytes
            log.debug("connection from %s authenticated as %s", self._peer, verdict.principal)
        self._unwritten_bytes += len(frame)
        self._pending.append(frame)
        return True

    def _fail_authentication(self, frame: bytearray, delay_ms: int) -> None:
        """Answer the failed authentication after ``delay_ms`` (after every answer before it), then close;
        nothing more is read or started meanwhile (the connection stays muted for good)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future = loop.create_future()
        self._pending.append(answer)
        if self._unmute is not None:
            self._unmute.cancel()

        def answer_now() -> None:
            if not answer.done():
                self._unwritten_bytes += len(frame)
                answer.set_result(ThrottledAnswer(frame, 0, close_after=True))
            self._write_ready()

        self._unmute = loop.call_later(delay_ms / 1000.0, answer_now)
        self._update_reading()

    def _wait_for_memory(self) -> None:
        """The pool refused this connection's next buffer: queue for it (reading pauses meanwhile)."""
        wanted = self._wanted_bytes = self._connection.wanted
        self._waiting_for_memory = True
        self._pool.wait(wanted, self._memory_granted)
        if self._waiting_for_memory:
            self._limit_events.record(
                MEMORY_POOL_FULL,
                "request memory is full (%d of queued.max.request.bytes=%d in use); connections stop "
                "reading until requests finish (%s waits for %d bytes, %d connections waiting)",
                self._pool.used,
                self._pool.capacity,
                self._peer,
                wanted,
                self._pool.waiting,
            )

    def _memory_granted(self) -> None:
        """The pool took the bytes this connection waited for: go on reading."""
        self._waiting_for_memory = False
        if self._closing:
            self._pool.release(self._wanted_bytes)  # lost while the grant was on its way: give it back
            return
        self._connection.memory_granted()
        if not self._in_read_events:
            self._read_events()

    def _start(self, event: RequestReceived) -> asyncio.Future | Answer:
        """Run the request's handler up to its first real suspension, here and now (an "eager" start:
        most handlers never suspend, and then no task is made); a handler still running continues in
        a task. Returns the answer, or a future of it."""
        coro = self._dispatch(event)
        if self._request_timer is not None:
            header = event.header
            coro = self._request_timer.timed(
                coro, header.api_key, header.api_version, self._read_at, self._timed_answers
            )
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

    def _holding_back(self) -> bool:
        """Whether to leave further requests unstarted (and unread): until the client reads answers,
        or while muted for a throttle time."""
        return (
            self._writing_paused
            or self._unmute is not None
            or len(self._pending) >= MAX_QUEUED_REQUESTS
            or self._unwritten_bytes >= MAX_UNWRITTEN_ANSWER_BYTES
        )

    def _update_reading(self) -> None:
        if self._closing or self._transport is None:
            return
        stop = self._waiting_for_memory or self._holding_back()
        if stop and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif not stop and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _mute_for(self, throttle_ms: int) -> None:
        """Mute this connection for ``throttle_ms`` (KIP-219: the answer carrying the throttle time
        goes out now; the client is expected to wait as long, and is not read meanwhile)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000.0
        if self._unmute is not None:
            if self._unmute.when() >= until:
                return
            self._unmute.cancel()
        self._unmute = loop.call_at(until, self._throttle_over)
        self._update_reading()

    def _throttle_over(self) -> None:
        self._unmute = None
        if not self._closing:
            self._read_events()

    def _request_done(self, task: asyncio.Future) -> None:
        if self._closing:
            return
        if not task.cancelled() and task.exception() is None and type(task.result()) is ThrottledAnswer:
            self._mute_for(task.result().throttle_ms)
        self._unwritten_bytes += _answer_size(task)
        was_holding_back = self._holding_back()
        self._write_ready()
        if was_holding_back:
            self._read_events()  # requests read but not started while we held back

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
            close_after = False
            if type(response) is ThrottledAnswer:
                close_after = response.close_after
                response = response.frame
            if response is not None:
                self._unwritten_bytes -= len(response)
                if transport is not None:
                    timing = self._timed_answers.pop(id(response), None) if self._timed_answers else None
                    write_start = time.monotonic() if timing is not None else 0.0
                    transport.write(response)
                    self.last_active = time.monotonic()
                    if timing is not None:
                        self._request_timer.written(timing, write_start, self.last_active)
            if close_after:
                self._closing = True
                if transport is not None:
                    transport.close()  # after the bytes written: the client reads why
                return


def _answer_size(answer: asyncio.Future | Answer) -> int:
    """Bytes of an answer that is made: given as bytes, or a finished future's result (0 while it runs,
    and for a failed one, whose connection is closed anyway)."""
    if isinstance(answer, asyncio.Future):
        if not answer.done() or answer.cancelled() or answer.exception() is not None:
            return 0
        answer = answer.result()
    return 0 if answer is None else len(answer)
