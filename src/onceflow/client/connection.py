"""One asyncio connection to a Kafka-protocol broker: framing, correlation ids, pipelining, versions.

Requests are written as soon as they are sent and answered through futures keyed by correlation id,
so many can be in flight on one socket (Kafka answers in order per connection; we do not rely on it).
On open, ApiVersions tells us what the broker speaks; every later request goes out at the highest
version both sides support, capped by :data:`CLIENT_MAX_VERSIONS` where our code fills the fields of
older versions only (e.g. Fetch v13+ names topics by id).

A request unanswered within the request timeout fails with REQUEST_TIMED_OUT and closes the
connection, as Kafka's NetworkClient does (``handleTimedOutRequests``): a broker that stopped
answering, or a half-open TCP connection, would otherwise be reused for ever, each request timing
out in turn. The connection's other pending requests fail with :class:`BrokerConnectionError`, and
whoever holds the connection opens a new one for the next request.

Security (``client.security``): with TLS the socket is wrapped before anything is sent; with SASL the
exchange runs right after ApiVersions, before the connection is handed out, and again before the
session the broker granted ends (KIP-368), alongside the connection's other requests.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import ssl
import struct
from collections.abc import Callable

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest

from onceflow.client.security import ClientSecurity, authenticate, reauthentication_delay_s
from onceflow.protocol.errors import ErrorCode, KafkaError, UnsupportedVersion

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")

# Highest version we send per API key, where it is below what kafka.protocol knows. Fetch 13+,
# Produce 13+ and DeleteTopics 6+ switch from topic names to topic ids.
CLIENT_MAX_VERSIONS: dict[int, int] = {0: 12, 1: 12, 3: 12, 18: 3, 20: 5}

DEFAULT_REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms

# What writing to a lost connection raises. uvloop raises RuntimeError ("the handler is closed") for a
# transport it closed when the peer reset the connection, before our read loop has seen the EOF: a
# broker killed with kill -9 under load. Escaping as RuntimeError, that write once killed the
# producer's sender (every later flush hung); it is a lost connection like any other.
_WRITE_ERRORS = (OSError, ConnectionError, RuntimeError)


class BrokerConnectionError(KafkaError):
    """The connection to the broker could not be opened, failed, or was closed."""

    code = ErrorCode.NETWORK_EXCEPTION


class Connection:
    """Framed, pipelined request/response over one TCP connection. Create with :meth:`open`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        host: str,
        port: int,
        client_id: str,
        request_timeout_s: float,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._reader = reader
        self._writer = writer
        self._correlation_ids = itertools.count(1)
        # correlation id -> (future, decode(frame) -> response, what was asked, timeout timer)
        self._pending: dict[int, tuple[asyncio.Future, Callable, str, asyncio.TimerHandle]] = {}
        # Requests their callers gave up on (cancelled): their late answers are dropped quietly. A
        # request that timed out closed the connection instead, so no answer comes after it.
        self._abandoned: set[int] = set()
        self._broker_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._closed_error: BaseException | None = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        self._security: ClientSecurity | None = None
        self._reauthentication: asyncio.TimerHandle | None = None
        self._reauthenticating: asyncio.Task | None = None
        self._detached = False  # the socket was handed over (detach): the read loop leaves it open

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "onceflow",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> Connection:
        """Connect, negotiate API versions and authenticate (``security``); raises
        :class:`BrokerConnectionError` if unreachable, an authentication error if refused."""
        context = security.ssl_context() if security is not None else None
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a task.cancel() that lands
            # as the awaited thing completes (see send()).
            async with asyncio.timeout(connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host if context is not None else None
                )
        except TimeoutError:
            raise BrokerConnectionError(
                f"cannot connect to {host}:{port}: timed out after {connect_timeout_s}s"
            )
        except ssl.SSLCertVerificationError as exc:
            raise BrokerConnectionError(
                f"cannot connect to {host}:{port}: the broker's TLS certificate is not trusted "
                f"({exc.verify_message}; see ssl.ca.location)"
            )
        except ssl.SSLError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: TLS failed ({exc.reason or exc})")
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {reason}")
        conn = cls(
            reader, writer, host=host, port=port, client_id=client_id, request_timeout_s=request_timeout_s
        )
        try:
            await conn._negotiate_versions()
            if security is not None and security.uses_sasl:
                conn._security = security
                conn._schedule_reauthentication(await authenticate(conn, security))
        except BaseException:
            await conn.close()
            raise
        return conn

    def _schedule_reauthentication(self, session_lifetime_ms: int) -> None:
        if session_lifetime_ms <= 0 or self._closed_error is not None:
            return
        loop = asyncio.get_running_loop()
        self._reauthentication = loop.call_later(
            reauthentication_delay_s(session_lifetime_ms), self._reauthenticate
        )

    def _reauthenticate(self) -> None:
        """KIP-368: authenticate again before the session ends; other requests go on meanwhile. A
        failure closes the connection (its owner opens a new one)."""
        self._reauthentication = None

        async def run() -> None:
            assert self._security is not None
            try:
                self._schedule_reauthentication(await authenticate(self, self._security))
            except KafkaError as exc:
                if self._closed_error is None:  # not merely closed meanwhile
                    log.warning("re-authentication to %s:%d failed: %s", self.host, self.port, exc)
                    self._fail(exc)

        self._reauthenticating = asyncio.get_running_loop().create_task(run())

    @property
    def broker_versions(self) -> dict[int, tuple[int, int]]:
        """``{api_key: (min_version, max_version)}`` as the broker advertised them."""
        return dict(self._broker_versions)

    def version_for(self, request_cls: type[ApiMessage]) -> int:
        """The highest version of ``request_cls`` that both we and the broker support."""
        api_key = request_cls.API_KEY
        if api_key not in self._broker_versions:
            raise UnsupportedVersion(f"broker {self.host}:{self.port} does not support {request_cls.name}")
        broker_min, broker_max = self._broker_versions[api_key]
        ours = min(request_cls.max_version, CLIENT_MAX_VERSIONS.get(api_key, request_cls.max_version))
        version = min(ours, broker_max)
        if version < max(broker_min, request_cls.valid_versions[0]):
            raise UnsupportedVersion(
                f"no common version of {request_cls.name}: broker {broker_min}-{broker_max}, client up to {ours}"
            )
        return version

    async def _negotiate_versions(self) -> None:
        version = CLIENT_MAX_VERSIONS[ApiVersionsRequest.API_KEY]
        request = ApiVersionsRequest(client_software_name="onceflow", client_software_version="0.1.0")
        try:
            response = await self.send(request, version=version)
        except KafkaError as exc:
            if exc.code != ErrorCode.CORRUPT_MESSAGE:
                raise
            # A broker that does not know our version answers with a v0 body (error 35), which does
            # not decode as the version we asked for (librdkafka's mock cluster does this); ask at v0.
            response = await self.send(request, version=0)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The broker answered at v0 with its own range; retry at the highest it speaks.
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            response = await self.send(
                request, version=min(version, theirs.get(ApiVersionsRequest.API_KEY, 0))
            )
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(f"ApiVersions failed at {self.host}:{self.port}", ErrorCode(response.error_code))
        self._broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        # v3+: the cluster's finalized feature levels (KIP-584), e.g. transaction.version (KIP-890).
        self.finalized_features = {
            f.name: f.max_version_level for f in getattr(response, "finalized_features", None) or ()
        }
        self.finalized_features_epoch = getattr(response, "finalized_features_epoch", -1)

    async def send(self, request: ApiMessage, *, version: int | None = None) -> ApiMessage | None:
        """Send ``request`` and wait for its response (None for a Produce with acks=0)."""
        self._check_open()
        if version is None:
            version = self.version_for(type(request))
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        request.API_VERSION = version  # kafka.protocol quirk: set the version before the header
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        frame = bytes(request.encode(header=True, framed=True))
        decode = None
        if request.expect_response():
            response_cls = request.header.get_response_class()  # the versioned response class
            decode = _KafkaPythonDecoder(response_cls)
        return await self._exchange(correlation_id, frame, decode, f"{request.name} v{version}")

    async def send_frame(self, request):
        """Send a request that writes its own bytes (``request.encode(correlation_id, client_id)``)
        and reads its own answer (``request.decode_response(frame)``, called on the frame from the
        correlation id on); for hot paths where kafka.protocol's generic classes cost too much
        (:class:`onceflow.client.producer.produce_wire.ProduceRequestFrame`). ``request.version``
        must be one both sides speak (see :meth:`version_for`)."""
        self._check_open()
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        frame = request.encode(correlation_id, self.client_id)
        decode = request.decode_response if request.expect_response() else None
        return await self._exchange(correlation_id, frame, decode, f"{request.name} v{request.version}")

    def _check_open(self) -> None:
        if self._closed_error is not None:
            raise self._closed_exception()

    def _closed_exception(self) -> BrokerConnectionError:
        return BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed_error}")

    def submit_frame(self, request) -> asyncio.Future:
        """Write ``request`` (an object as for :meth:`send_frame`) now and return a future of its
        decoded answer; None once written if it expects no answer (acks=0); or the error
        (:class:`BrokerConnectionError`, REQUEST_TIMED_OUT after the request timeout, which closes
        the connection and fails the other pending requests with BrokerConnectionError).

        For the producer's sender, which handles answers in callbacks rather than with a task per
        request. Each request is its own write: joining the requests of one sender pass into one
        write measured slower (the broker then answered in bursts, leaving the pipeline empty
        between them).
        """
        loop = asyncio.get_running_loop()
        if self._closed_error is not None:
            future = loop.create_future()
            future.set_exception(self._closed_exception())
            return future
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        frame = request.encode(correlation_id, self.client_id)
        answered = request.expect_response()
        if answered:
            future = self._register(
                loop, correlation_id, request.decode_response, f"{request.name} v{request.version}"
            )
        else:
            future = loop.create_future()
        try:
            self._writer.write(frame)
        except _WRITE_ERRORS as exc:
            self._fail(exc)  # fails an answered request's future
            if not answered:
                future.set_exception(
                    BrokerConnectionError(f"lost connection to {self.host}:{self.port}: {exc}")
                )
            return future
        if not answered:
            future.set_result(None)
        return future

    def _register(self, loop, correlation_id: int, decode: Callable, what: str) -> asyncio.Future:
        """A future for the answer to ``correlation_id``, failed with REQUEST_TIMED_OUT if none comes
        within the request timeout (which closes the connection, see :meth:`_time_out`). A timer on
        the future, not wait_for (3.11's can return the response and lose a task.cancel() landing in
        the same loop iteration; a consumer stopping its fetch loop hung on that) nor asyncio.timeout
        (~6% of the producer's CPU at thousands of requests per second)."""
        future = loop.create_future()
        timeout = self.request_timeout_s
        timer = loop.call_later(timeout, self._time_out, correlation_id, timeout)
        self._pending[correlation_id] = (future, decode, what, timer)
        return future

    async def _exchange(self, correlation_id: int, frame: bytes, decode, what: str):
        """Write ``frame``; with a ``decode`` function wait for the answer to ``correlation_id``."""
        future = None
        if decode is not None:
            future = self._register(asyncio.get_running_loop(), correlation_id, decode, what)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except _WRITE_ERRORS as exc:
            self._forget(correlation_id)
            self._fail(exc)
            raise BrokerConnectionError(f"lost connection to {self.host}:{self.port}: {exc}")
        if future is None:
            return None
        try:
            return await future  # awaiting the future itself keeps a cancellation
        except asyncio.CancelledError:
            self._forget(correlation_id)
            raise

    def _forget(self, correlation_id: int) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is not None:
            entry[3].cancel()
            self._abandoned.add(correlation_id)

    def _time_out(self, correlation_id: int, timeout: float) -> None:
        """No answer to ``correlation_id`` within ``timeout``: Kafka's rule (NetworkClient's
        handleTimedOutRequests) is to disconnect, whatever else is in flight. The request fails with
        REQUEST_TIMED_OUT and the others with :class:`BrokerConnectionError`, both retriable (Kafka
        completes them all as disconnected by a timeout: its consumer raises DisconnectException,
        its producer retries them as REQUEST_TIMED_OUT). The transport is aborted, not flushed: the
        socket may be half open."""
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return
        future, _decode, what, _timer = entry
        reason = f"{what} got no answer within the request timeout ({timeout}s)"
        if not future.done():
            future.set_exception(
                KafkaError(
                    f"{what.split()[0]} to {self.host}:{self.port} timed out after {timeout}s; "
                    "the connection was closed",
                    ErrorCode.REQUEST_TIMED_OUT,
                )
            )
        log.info(
            "disconnecting from %s:%d: %s (%d more requests in flight fail)",
            self.host,
            self.port,
            reason,
            len(self._pending),
        )
        self._fail(TimeoutError(reason))

    async def _read_loop(self) -> None:
        try:
            while True:
                size_bytes = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(size_bytes)
                frame = await self._reader.readexactly(size)
                if self._closed_error is not None:
                    return  # failed meanwhile (a request timed out): its requests have failed already
                (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    if correlation_id in self._abandoned:
                        self._abandoned.discard(correlation_id)
                        log.debug("dropping the late answer to abandoned request %d", correlation_id)
                    else:
                        log.warning("dropping response with unknown correlation id %d", correlation_id)
                    continue
                future, decode, what, timer = entry
                timer.cancel()
                if future.done():
                    continue
                try:
                    future.set_result(decode(frame))
                except KafkaError as exc:
                    future.set_exception(exc)
                except Exception as exc:  # kafka.protocol reports truncation as struct/index errors
                    future.set_exception(
                        KafkaError(f"unreadable answer to {what}: {exc!r}", ErrorCode.CORRUPT_MESSAGE)
                    )
        except (asyncio.IncompleteReadError, OSError, ConnectionError) as exc:
            self._fail(
                exc if not isinstance(exc, asyncio.IncompleteReadError) else EOFError("closed by broker")
            )
        except asyncio.CancelledError:
            if self._detached:
                raise  # the socket is handed over (detach): keep it open
            self._mark_closed(EOFError("connection closed"))
            self._writer.close()  # close() does this too; a cancel from elsewhere must not keep the socket
            raise

    def _fail(self, exc: BaseException) -> None:
        """The connection broke (EOF, a socket error): fail what waits on it and let go of the socket
        now, not when the object is garbage collected. Nothing written but unsent is worth keeping (the
        requests it carried have failed), so the transport is aborted rather than flushed; its
        connection_lost then ends the read loop, if it is not what called us."""
        self._mark_closed(exc)
        self._writer.transport.abort()

    def _mark_closed(self, exc: BaseException) -> None:
        if self._closed_error is None:
            self._closed_error = exc
        if self._reauthentication is not None:
            self._reauthentication.cancel()
            self._reauthentication = None
        pending, self._pending = self._pending, {}
        for future, _decode, _what, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(
                    BrokerConnectionError(f"lost connection to {self.host}:{self.port}: {exc}")
                )

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    async def detach(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Hand the open socket, versions negotiated and authenticated, to a caller that frames its
        own requests from now on (the Raft quorum's peer connections); this object is closed to
        further use. Only between requests: nothing may be in flight (no answer is on its way)."""
        if self._pending:
            raise RuntimeError(f"cannot detach from {self.host}:{self.port} with requests in flight")
        self._check_open()
        self._detached = True
        self._read_task.cancel()
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass
        self._mark_closed(EOFError("handed over"))
        return self._reader, self._writer

    async def close(self) -> None:
        """Fail what waits, send what is written (e.g. an acks=0 Produce) and close the socket."""
        self._mark_closed(EOFError("connection closed"))
        self._read_task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError):
            pass
        try:
            await self._read_task
        except (asyncio.CancelledError, Exception):
            pass


class _KafkaPythonDecoder:
    """Decodes a response frame with a kafka.protocol response class (header included)."""

    __slots__ = ("response_cls",)

    def __init__(self, response_cls: type[ApiMessage]) -> None:
        self.response_cls = response_cls

    def __call__(self, frame: bytes) -> ApiMessage:
        return self.response_cls.decode(frame, header=True)
