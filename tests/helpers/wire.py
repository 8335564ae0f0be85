"""Raw Kafka wire access for tests: build request frames and talk to a broker over one socket.

Real clients check many things locally (partition counts, topic names) before a request ever
reaches the broker; these helpers let a test send exactly the request it means to, so the broker's
own answer (its error code) is what the test sees. Messages come from ``kafka.protocol``.
"""

from __future__ import annotations

import socket
import struct
import time

from kafka.protocol.api_message import ApiMessage
from kafka.record.default_records import DefaultRecordBatchBuilder

from .broker import LOOPBACK

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def encode_request(
    request: ApiMessage, version: int, correlation_id: int = 1, client_id: str = "tests"
) -> bytes:
    """One length-prefixed request frame (header + body) at ``version``."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def build_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    codec: str = "none",
    timestamp_ms: int | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> bytes:
    """A magic-2 record batch (base offset 0) holding ``(key, value)`` records."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=headers or [])
    return bytes(builder.build())


class WireClient:
    """A blocking single-connection client: send a request object, get the decoded response."""

    def __init__(self, bootstrap: str, timeout: float = 15.0):
        host, port = bootstrap.rsplit(":", 1)
        if host != LOOPBACK:
            raise ValueError(f"tests only talk to {LOOPBACK}, not {host}")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def recv_frame(self) -> bytes:
        """One response frame without its 4-byte length prefix."""
        (size,) = struct.unpack(">i", self._recv_exactly(4))
        return self._recv_exactly(size)

    def request(self, request: ApiMessage, version: int):
        self._correlation_id += 1
        self.send_raw(encode_request(request, version, self._correlation_id))
        frame = self.recv_frame()
        response_class = request.header.get_response_class()
        response = response_class.decode(frame, version=version, header=True)
        if response.header.correlation_id != self._correlation_id:
            raise AssertionError(
                f"correlation id {response.header.correlation_id} != expected {self._correlation_id}"
            )
        return response

    def _recv_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)
