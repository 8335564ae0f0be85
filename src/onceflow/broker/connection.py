"""Sans-IO request framing for one client connection.

``Connection`` turns received bytes into events without touching a socket or an event loop (h11's
shape): feed bytes with ``receive_data``, then call ``next_event`` until it returns ``NEED_DATA``.
Events:

- ``RequestReceived``: a decoded request of an API and version we serve;
- ``UnsupportedApiVersionsRequest``: an ApiVersions request at a version above ours; Kafka answers it
  with a v0 body and UNSUPPORTED_VERSION so the client can retry lower;
- ``ConnectionBroken``: the stream cannot be read any further (negative or oversized frame size,
  unknown API key, unsupported version, undecodable header or body). Kafka closes the connection in
  all these cases (it cannot answer a request it cannot parse); so do we. Once broken, a connection
  keeps returning the same event.

Buffers (the produce path's copies): bytes are read straight into the connection's buffers through
``get_buffer``/``buffer_updated`` (asyncio's ``BufferedProtocol`` shape). Small frames land in one
reusable receive buffer (32 KiB, grown up to 256 KiB while reads keep filling it) and are copied out
whole; a frame that is still incomplete once its size is
known gets a buffer of exactly its size, and the rest of it is read straight into that buffer. So a
1 MB Produce request crosses from the kernel into the one ``bytearray`` that its handler and the log
then use, without the stream-reader and join copies. Every frame handed out is a fresh ``bytearray``
that no later read touches, so handlers may keep views of it and patch it in place.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.protocol import apis
from onceflow.protocol.errors import InvalidRequest

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
# The reusable receive buffer: one read takes up to this much of small pipelined requests. It starts
# at INITIAL_RECEIVE_BUFFER_BYTES and doubles up to RECEIVE_BUFFER_BYTES each time a read fills all the
# room it was given (more was waiting): an idle or quiet connection keeps 32 KiB, not 256 KiB, of
# zero-filled memory (a thousand consumers' connections: 32 MB instead of 256 MB).
RECEIVE_BUFFER_BYTES = 256 * 1024
INITIAL_RECEIVE_BUFFER_BYTES = 32 * 1024
_MIN_FREE_BYTES = 16 * 1024


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


@dataclass(frozen=True, slots=True)
class SupportedApi:
    """One API we serve: its version range and kafka.protocol request class."""

    api_key: int
    min_version: int
    max_version: int
    request_class: Any


@dataclass(frozen=True, slots=True)
class RequestReceived:
    header: apis.RequestHeader
    request: Any
    size: int  # frame size in bytes, without the 4-byte size prefix


@dataclass(frozen=True, slots=True)
class UnsupportedApiVersionsRequest:
    correlation_id: int
    api_version: int


@dataclass(frozen=True, slots=True)
class ConnectionBroken:
    reason: str


Event = RequestReceived | UnsupportedApiVersionsRequest | ConnectionBroken


class Connection:
    """Frames and decodes the requests of one connection; knows nothing about responses."""

    def __init__(
        self,
        supported: Mapping[int, SupportedApi],
        *,
        max_request_bytes: int,
        receive_buffer_bytes: int = RECEIVE_BUFFER_BYTES,
        initial_receive_buffer_bytes: int = INITIAL_RECEIVE_BUFFER_BYTES,
    ) -> None:
        self._supported = supported
        self._max_request_bytes = max_request_bytes
        # Unparsed bytes are _buffer[_start:_end]; reads land at _end.
        self._buffer = bytearray(min(initial_receive_buffer_bytes, receive_buffer_bytes))
        self._max_buffer_bytes = receive_buffer_bytes
        self._offered = 0  # the size of the last view get_buffer gave out of _buffer
        self._grow = False  # a read filled all of it: more is waiting, give the next read more room
        self._start = 0
        self._end = 0
        # A frame bigger than what was buffered when its size was read: filled in place up to _filled.
        self._frame: bytearray | None = None
        self._filled = 0
        self._broken: ConnectionBroken | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handed out as events."""
        return self._end - self._start + (self._filled if self._frame is not None else 0)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read should land (``BufferedProtocol.get_buffer``): the rest of the frame
        being filled, or free space in the receive buffer. Never empty."""
        if self._filling_frame():
            return memoryview(self._frame)[self._filled :]
        unread = self._end - self._start
        if self._grow:
            self._grow = False
            grown = bytearray(min(2 * len(self._buffer), self._max_buffer_bytes))
            grown[:unread] = self._buffer[self._start : self._end]
            self._buffer, self._start, self._end = grown, 0, unread
        if self._start and len(self._buffer) - self._end < _MIN_FREE_BYTES:
            # Move the unread tail to the front; equal-length slice assignment never resizes, so
            # views an event loop still holds stay valid.
            self._buffer[:unread] = self._buffer[self._start : self._end]
            self._start, self._end = 0, unread
        if len(self._buffer) - self._end < _MIN_FREE_BYTES:
            # Only when events were not drained between reads (tests feeding many frames at once).
            grown = bytearray(max(2 * len(self._buffer), unread + _MIN_FREE_BYTES))
            grown[:unread] = self._buffer[self._start : self._end]
            self._buffer, self._start, self._end = grown, 0, unread
        self._offered = len(self._buffer) - self._end
        return memoryview(self._buffer)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the last ``get_buffer`` view."""
        if self._broken is not None:
            return
        if self._filling_frame():
            self._filled += nbytes
        else:
            self._end += nbytes
            if nbytes == self._offered and len(self._buffer) < self._max_buffer_bytes:
                self._grow = True

    def _filling_frame(self) -> bool:
        # A complete frame waiting for next_event takes no more bytes: later ones are later frames.
        return self._frame is not None and self._filled < len(self._frame)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes that were read elsewhere (tests, or a loop without buffered reads)."""
        view = memoryview(data).cast("B")
        while view and self._broken is None:
            target = self.get_buffer(len(view))
            count = min(len(target), len(view))
            target[:count] = view[:count]
            self.buffer_updated(count)
            view = view[count:]

    def next_event(self) -> Event | _NeedData:
        if self._broken is not None:
            return self._broken
        if self._frame is not None:
            if self._filled < len(self._frame):
                return NEED_DATA
            frame, self._frame = self._frame, None
            return self._decode(frame)
        unread = self._end - self._start
        if unread < _SIZE.size:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if size <= 0 or size > self._max_request_bytes:
            # Checked before buffering the frame, so an oversized frame never fills memory.
            return self._break(
                f"request size {size} is outside 1..{self._max_request_bytes} (socket.request.max.bytes)"
            )
        body_start = self._start + _SIZE.size
        available = self._end - body_start
        if available >= size:
            frame = self._buffer[body_start : body_start + size]  # a copy the next reads cannot touch
            self._start = body_start + size
            if self._start == self._end:
                self._start = self._end = 0
            return self._decode(frame)
        # Incomplete: give it a buffer of its own and read the rest straight into it.
        self._frame = bytearray(size)
        self._frame[:available] = self._buffer[body_start : self._end]
        self._filled = available
        self._start = self._end = 0
        return NEED_DATA

    def _break(self, reason: str) -> ConnectionBroken:
        self._broken = ConnectionBroken(reason)
        self._frame = None
        self._start = self._end = 0
        return self._broken

    def _decode(self, frame: bytearray) -> Event:
        try:
            api_key, api_version, correlation_id = apis.peek_request_header(frame)
        except InvalidRequest as exc:
            return self._break(str(exc))
        api = self._supported.get(api_key)
        if api is None:
            return self._break(f"unknown or unsupported API key {api_key}")
        if not api.min_version <= api_version <= api.max_version:
            if api_key == API_VERSIONS_KEY and api_version > api.max_version:
                return UnsupportedApiVersionsRequest(correlation_id, api_version)
            return self._break(
                f"API key {api_key} version {api_version} is outside {api.min_version}..{api.max_version}"
            )
        try:
            header, request = apis.decode_request(frame, api.request_class, api_version)
        except InvalidRequest as exc:
            return self._break(str(exc))
        return RequestReceived(header, request, len(frame))
