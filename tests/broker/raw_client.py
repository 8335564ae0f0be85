"""A tiny asyncio Kafka client for broker tests: send kafka.protocol requests, read decoded responses.

It sends exactly what a test asks (no client-side checks) and can pipeline: ``send`` several
requests, then ``receive`` their responses in order.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.record.default_records import DefaultRecordBatchBuilder

from onceflow.protocol import apis


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._next_correlation_id = 1
        self._sent: list[tuple[int, type[ApiMessage], int]] = []  # (correlation id, response class, version)

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def send(self, request: ApiMessage, version: int, *, expect_response: bool = True) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=correlation_id, client_id="broker-tests")
        self.writer.write(bytes(request.encode(header=True, framed=True)))
        await self.writer.drain()
        if expect_response:
            self._sent.append((correlation_id, apis.response_class(request.API_KEY), version))
        return correlation_id

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 10.0) -> bytes | None:
        """One response frame without its size prefix; ``None`` if the broker closed the connection."""
        try:
            size_bytes = await asyncio.wait_for(self.reader.readexactly(4), timeout)
            (size,) = struct.unpack(">i", size_bytes)
            return await asyncio.wait_for(self.reader.readexactly(size), timeout)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def receive(self, timeout: float = 10.0) -> Any:
        correlation_id, response_cls, version = self._sent.pop(0)
        frame = await self.read_frame(timeout)
        assert frame is not None, "broker closed the connection instead of answering"
        response = response_cls.decode(frame, version=version, header=True)
        assert response.header.correlation_id == correlation_id
        return response

    async def request(self, request: ApiMessage, version: int, timeout: float = 10.0) -> Any:
        await self.send(request, version)
        return await self.receive(timeout)

    async def is_closed_by_broker(self, timeout: float = 5.0) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except ConnectionError:
            return True
        return data == b""


def build_batch(values: list[bytes], *, timestamp_ms: int | None = None, key: bytes | None = None) -> bytes:
    """A magic-2 record batch (base offset 0) of ``values``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=[])
    return bytes(builder.build())


class running_broker:  # noqa: N801 - used as ``async with running_broker(tmp_path) as broker``
    """An in-process single node (broker and its own controller) on a free loopback port, stopped on
    exit; entering gives its ``Broker``."""

    def __init__(self, data_dir, *, log_opener=None, single_node_files: bool = False, **config: Any) -> None:
        """``single_node_files``: run on the in-memory quorum that keeps topics.json, as the
        single-node onceflow before the metadata log did (to make the data dirs it left)."""
        from onceflow.broker.config import BrokerConfig

        self.config = BrokerConfig(port=0, data_dir=data_dir, **config)
        self.log_opener = log_opener
        self.single_node_files = single_node_files

    async def __aenter__(self):
        from onceflow.server.node import single_node
        from onceflow.server.quorum import LocalQuorum

        factory = (lambda node, _cluster_id: LocalQuorum(node.node_id)) if self.single_node_files else None
        self.node = single_node(self.config, log_opener=self.log_opener, quorum_factory=factory)
        await self.node.start()
        self.broker = self.node.broker
        return self.broker

    async def __aexit__(self, *exc_info: object) -> None:
        await self.node.stop()
