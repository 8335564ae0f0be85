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

    def __init__(self, supported: Mapping[int, SupportedApi], *, max_request_bytes: int) -> None:
        self._supported = supported
        self._max_request_bytes = max_request_bytes
        self._buffer = bytearray()
        self._broken: ConnectionBroken | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken is None:
            self._buffer += data

    def next_event(self) -> Event | _NeedData:
        if self._broken is not None:
            return self._broken
        if len(self._buffer) < _SIZE.size:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, 0)
        if size <= 0 or size > self._max_request_bytes:
            # Checked before buffering the frame, so an oversized frame never fills memory.
            return self._break(
                f"request size {size} is outside 1..{self._max_request_bytes} (socket.request.max.bytes)"
            )
        end = _SIZE.size + size
        if len(self._buffer) < end:
            return NEED_DATA
        frame = bytes(memoryview(self._buffer)[_SIZE.size : end])
        del self._buffer[:end]  # bytearray drops a prefix without moving the rest
        return self._decode(frame)

    def _break(self, reason: str) -> ConnectionBroken:
        self._broken = ConnectionBroken(reason)
        self._buffer.clear()
        return self._broken

    def _decode(self, frame: bytes) -> Event:
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
