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
whole. A frame that is still incomplete once its size is known gets a buffer of its own, and the rest
of it is read straight into that buffer: a 1 MB Produce request crosses from the kernel into the one
``bytearray`` that its handler and the log then use, without stream-reader and join copies. Every frame
handed out is a fresh ``bytearray`` that no later read touches, so handlers may keep views of it and
patch it in place.

Memory follows what arrived, never the announced size alone (issue 20: 100 connections announcing
50 MB and sending 1 KB each made the broker allocate 3.9 GB). A frame's own buffer is at most
``FRAME_BUFFER_GROWTH`` times the bytes of it received so far; until that covers the whole frame, its
start stays in the receive buffer (which is there anyway), and a frame too big for even that grows by
the same factor as its bytes come (a copy each time; only frames above ~4 MB whose start arrives
slowly get there). A real client sends a frame in one go, so its frame buffer is sized once, as
before. Every buffer handed out as a request, and every frame buffer being filled, is taken from the
broker's ``MemoryPool`` (``queued.max.request.bytes``) and given back by the caller once the request is
handled (``RequestReceived.charged``). When the pool refuses, ``next_event`` returns ``NEED_MEMORY``:
the caller stops reading and asks the pool to wait (``wanted``), then calls ``memory_granted``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.broker.memory_pool import MemoryPool
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
# A frame's own buffer is at most this many times the bytes of it received: with a 256 KiB receive
# buffer, frames up to ~4 MB get their whole buffer at once, as soon as 1/16 of them has arrived.
FRAME_BUFFER_GROWTH = 16


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


class _NeedMemory:
    def __repr__(self) -> str:
        return "NEED_MEMORY"


NEED_DATA = _NeedData()
# The memory pool refused the next buffer: stop reading until ``memory_granted`` (see ``wanted``).
NEED_MEMORY = _NeedMemory()


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
    charged: int = 0  # bytes taken from the memory pool for it: release them once it is handled


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
        pool: MemoryPool | None = None,
    ) -> None:
        self._supported = supported
        self._pool = pool if pool is not None else MemoryPool(-1)
        self._max_request_bytes = max_request_bytes
        # Unparsed bytes are _buffer[_start:_end]; reads land at _end.
        self._buffer = bytearray(min(initial_receive_buffer_bytes, receive_buffer_bytes))
        self._max_buffer_bytes = receive_buffer_bytes
        self._offered = 0  # the size of the last view get_buffer gave out of _buffer
        self._grow = False  # a read filled all of it: more is waiting, give the next read more room
        self._start = 0
        self._end = 0
        # A frame bigger than what was buffered when its size was read: filled in place up to _filled;
        # its buffer holds _frame_charge bytes of the pool and may be shorter than the frame's size.
        self._frame: bytearray | None = None
        self._frame_size = 0
        self._frame_charge = 0
        self._filled = 0
        self._wanted = 0  # bytes the pool refused: next_event answers NEED_MEMORY until granted
        self._granted = 0  # bytes the pool took for us while we waited, for the next allocation
        self._broken: ConnectionBroken | None = None

    @property
    def max_request_bytes(self) -> int:
        """The largest frame accepted (``socket.request.max.bytes``; lower before SASL authentication)."""
        return self._max_request_bytes

    @max_request_bytes.setter
    def max_request_bytes(self, value: int) -> None:
        self._max_request_bytes = value

    @property
    def wanted(self) -> int:
        """Bytes this connection waits for from the pool (after ``NEED_MEMORY``), else 0."""
        return self._wanted

    @property
    def held_bytes(self) -> int:
        """Pool bytes held by the frame being read (not by requests already handed out)."""
        return self._frame_charge + self._granted

    def memory_granted(self) -> None:
        """The pool took ``wanted`` bytes for us: the next ``next_event`` uses them."""
        self._granted += self._wanted
        self._wanted = 0

    def close(self) -> None:
        """Give back every pool byte this connection holds that was not handed out with a request."""
        self._pool.release(self.held_bytes)
        self._frame = None
        self._frame_charge = self._granted = self._wanted = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handed out as events."""
        return self._end - self._start + (self._filled if self._frame is not None else 0)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read should land (``BufferedProtocol.get_buffer``): the rest of the frame
        being filled, or free space in the receive buffer. Never empty."""
        if self._frame is not None and self._filled == len(self._frame) < self._frame_size:
            # Only when events were not drained between reads (next_event grows it, or waits).
            self._grow_frame(force=True)
        if self._filling_frame():
            return memoryview(self._frame)[self._filled :]
        unread = self._end - self._start
        if self._grow:
            self._grow = False
            grown = bytearray(min(2 * len(self._buffer), self._max_buffer_bytes))
            grown[:unread] = memoryview(self._buffer)[self._start : self._end]
            self._buffer, self._start, self._end = grown, 0, unread
        if self._start and len(self._buffer) - self._end < _MIN_FREE_BYTES:
            # Move the unread tail to the front; equal-length slice assignment never resizes, so
            # views an event loop still holds stay valid.
            self._buffer[:unread] = self._buffer[self._start : self._end]
            self._start, self._end = 0, unread
        if len(self._buffer) - self._end < _MIN_FREE_BYTES:
            # Only when events were not drained between reads (tests feeding many frames at once).
            grown = bytearray(max(2 * len(self._buffer), unread + _MIN_FREE_BYTES))
            grown[:unread] = memoryview(self._buffer)[self._start : self._end]
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

    def next_event(self) -> Event | _NeedData | _NeedMemory:
        if self._broken is not None:
            return self._broken
        if self._wanted:
            return NEED_MEMORY
        if self._frame is not None:
            if self._filled < self._frame_size:
                if self._filled < len(self._frame) or self._grow_frame():
                    return NEED_DATA
                return NEED_MEMORY
            frame, charge = self._frame, self._frame_charge
            self._frame, self._frame_charge = None, 0
            return self._decode(frame, charge)
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
            if not self._allocate(size):
                return NEED_MEMORY
            frame = self._buffer[body_start : body_start + size]  # a copy the next reads cannot touch
            self._start = body_start + size
            if self._start == self._end:
                self._start = self._end = 0
            return self._decode(frame, size)
        # Incomplete: a buffer of its own, as big as what arrived allows (see the module doc).
        capacity = min(size, max(FRAME_BUFFER_GROWTH * available, _MIN_FREE_BYTES))
        if capacity < size and _SIZE.size + available + _MIN_FREE_BYTES <= self._max_buffer_bytes:
            return NEED_DATA  # the receive buffer keeps its start until more of it has come
        if not self._allocate(capacity):
            return NEED_MEMORY
        self._frame = bytearray(capacity)
        # Through a view: a temporary copy of up to 256 KiB would take a freed frame-sized block from
        # the heap, and the next frame would then need fresh pages (page faults, ~1 ms per MB).
        self._frame[:available] = memoryview(self._buffer)[body_start : self._end]
        self._frame_size = size
        self._frame_charge = capacity
        self._filled = available
        self._start = self._end = 0
        return NEED_DATA

    def _allocate(self, size: int) -> bool:
        """Take ``size`` bytes from the pool (or the bytes it granted while we waited); False: wait."""
        if self._granted:
            granted, self._granted = self._granted, 0
            if granted == size:
                return True
            self._pool.release(granted)  # not what we wait for (the frame changed): ask afresh
        if self._pool.try_allocate(size):
            return True
        self._wanted = size
        return False

    def _grow_frame(self, *, force: bool = False) -> bool:
        """Give the frame being read a bigger buffer, ``FRAME_BUFFER_GROWTH`` times what it holds."""
        capacity = min(self._frame_size, FRAME_BUFFER_GROWTH * self._filled)
        if force:
            self._pool.take(capacity)  # past the bound: only a caller that does not drain gets here
        elif not self._allocate(capacity):
            return False
        grown = bytearray(capacity)
        grown[: self._filled] = self._frame
        self._pool.release(self._frame_charge)
        self._frame, self._frame_charge = grown, capacity
        return True

    def _break(self, reason: str, charge: int = 0) -> ConnectionBroken:
        self._pool.release(charge)
        self.close()
        self._broken = ConnectionBroken(reason)
        self._start = self._end = 0
        return self._broken

    def _decode(self, frame: bytearray, charge: int) -> Event:
        try:
            api_key, api_version, correlation_id = apis.peek_request_header(frame)
        except InvalidRequest as exc:
            return self._break(str(exc), charge)
        api = self._supported.get(api_key)
        if api is None:
            return self._break(f"unknown or unsupported API key {api_key}", charge)
        if not api.min_version <= api_version <= api.max_version:
            if api_key == API_VERSIONS_KEY and api_version > api.max_version:
                self._pool.release(charge)  # answered from its header alone
                return UnsupportedApiVersionsRequest(correlation_id, api_version)
            return self._break(
                f"API key {api_key} version {api_version} is outside {api.min_version}..{api.max_version}",
                charge,
            )
        try:
            header, request = apis.decode_request(frame, api.request_class, api_version)
        except InvalidRequest as exc:
            return self._break(str(exc), charge)
        return RequestReceived(header, request, len(frame), charge)
