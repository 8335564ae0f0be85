"""The quorum on the network: a :class:`RaftServer` runs one :class:`RaftNode` on the asyncio event
loop. It serves the controller listener (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
FetchSnapshot, DescribeQuorum and ApiVersions, Kafka framing), keeps one outbound connection per
other voter, fires the node's timers, and hands the node's events to the listener.

Everything the node does happens on the loop's thread, one input at a time, so the node needs no
locks; its durable writes (fsync) block the loop for their duration, as Kafka's raft thread blocks
on them. A connection that fails fails its request in flight (the node backs off and retries), and
is opened again on the next request.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode, InvalidRequest
from onceflow.raft import wire
from onceflow.raft.config import MAX_FETCH_SIZE_BYTES, RaftConfig
from onceflow.raft.listener import Listener, deliver
from onceflow.raft.messages import DescribeQuorumResponse, Inbound, Outbound
from onceflow.raft.node import NEVER, Outputs, RaftNode
from onceflow.raft.storage import RaftStorage

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# The largest frame accepted: a Fetch answer of the largest batch, and room around it.
MAX_FRAME_BYTES = MAX_FETCH_SIZE_BYTES + 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
# (host, port) -> an open stream to another node's controller listener, ready for the quorum's requests.
Connect = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if size < 0 or size > MAX_FRAME_BYTES:
        raise InvalidRequest(f"frame of {size} bytes")
    return await reader.readexactly(size)


class _Peer:
    """The outbound connection to one other node: requests written in order, answers matched by
    correlation id (the node's own)."""

    def __init__(self, server: RaftServer, node_id: int, address: tuple[str, int]) -> None:
        self.server = server
        self.node_id = node_id
        self.address = address
        self._writer: asyncio.StreamWriter | None = None
        self._connecting: asyncio.Task | None = None
        self._queue: list[tuple[int, Any]] = []
        self._pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._reader_task: asyncio.Task | None = None
        self._last_refusal: str | None = None

    def _refused(self, reason: str) -> None:
        """A connection the other node refused (authentication, TLS): said once per distinct reason,
        not at every retry."""
        if reason != self._last_refusal:
            log.warning("node %d cannot connect to node %d: %s", self.server.node_id, self.node_id, reason)
            self._last_refusal = reason

    def send(self, correlation_id: int, body) -> None:
        self._queue.append((correlation_id, body))
        if self._writer is not None:
            self._flush()
        elif self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        host, port = self.address
        try:
            reader, writer = await asyncio.wait_for(self.server.connect(host, port), CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            log.debug(
                "node %d cannot reach node %d at %s:%d: %s",
                self.server.node_id,
                self.node_id,
                host,
                port,
                exc,
            )
            self._connecting = None
            self._fail_all()
            return
        except Exception as exc:  # the connector's own refusal: TLS or SASL failed
            self._refused(str(exc))
            self._connecting = None
            self._fail_all()
            return
        self._last_refusal = None
        self._writer = writer
        self._connecting = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, writer))
        self._flush()

    def _flush(self) -> None:
        writer = self._writer
        assert writer is not None
        queue, self._queue = self._queue, []
        for correlation_id, body in queue:
            message = wire.request_to_wire(body)
            api_key = message.API_KEY
            message.with_header(correlation_id=correlation_id, client_id=f"raft-{self.server.node_id}")
            self._pending[correlation_id] = (api_key, message.API_VERSION)
            writer.write(bytes(message.encode(header=True, framed=True)))

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                frame = await _read_frame(reader)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                sent = self._pending.pop(correlation_id, None)
                if sent is None:
                    continue
                api_key, version = sent
                try:
                    message = apis.response_class(api_key).decode(frame, version=version, header=True)
                    body = wire.response_from_wire(api_key, message)
                except wire.WireError as exc:
                    log.info("node %d: request to node %d failed: %s", self.server.node_id, self.node_id, exc)
                    self.server._request_failed(self.node_id, correlation_id)
                    continue
                self.server._inbound(Inbound(self.node_id, correlation_id, body))
        except (OSError, asyncio.IncompleteReadError, InvalidRequest, ValueError) as exc:
            log.debug("node %d: connection to node %d closed: %r", self.server.node_id, self.node_id, exc)
        except asyncio.CancelledError:
            raise
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            self._fail_all()

    def _fail_all(self) -> None:
        failed = [c for c, _ in self._queue] + list(self._pending)
        self._queue.clear()
        self._pending.clear()
        for correlation_id in failed:
            self.server._request_failed(self.node_id, correlation_id)

    async def close(self) -> None:
        for task in (self._connecting, self._reader_task):
            if task is not None:
                task.cancel()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class RaftServer:
    """One quorum node on the network. ``voters`` is ``controller.quorum.voters`` parsed
    (``{id: (host, port)}``); a node not among them is an observer. ``listen`` is the controller
    listener's address (a voter's own entry by default). ``connect(host, port)`` opens the stream to
    another node's controller listener (plain TCP by default; the server package's connector adds TLS
    and SASL, done before the stream is handed over)."""

    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, tuple[str, int]],
        storage: RaftStorage,
        config: RaftConfig | None = None,
        *,
        listener: Listener | None = None,
        listen: tuple[str, int] | None = None,
        cluster_id: str | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
        connect: Connect | None = None,
    ) -> None:
        self.node_id = node_id
        self.connect: Connect = connect or asyncio.open_connection
        self.voters = dict(voters)
        self.storage = storage
        self.config = config or RaftConfig()
        self.listener = listener
        self.listen = listen or self.voters.get(node_id)
        self.cluster_id = cluster_id
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        self.node: RaftNode | None = None
        self._peers = {v: _Peer(self, v, address) for v, address in self.voters.items() if v != node_id}
        self._server: asyncio.base_events.Server | None = None
        self._loop_task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._next_poll_ms = 0
        self._sleep_until_ms = 0
        self._stopping = False
        self._connections: set[asyncio.StreamWriter] = set()
        self.failure: BaseException | None = None
        self.port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.node = RaftNode(
            self.node_id,
            self.voters,
            self.storage,
            self.config,
            self._rng,
            now_ms=self._clock_ms(),
            cluster_id=self.cluster_id,
        )
        if self.listen is not None:
            host, port = self.listen
            self._server = await asyncio.start_server(self._serve, host, port)
            self.port = self._server.sockets[0].getsockname()[1]
        self._loop_task = asyncio.get_running_loop().create_task(self._run())
        # without a listener of its own, the node's controller listener hands it the quorum's requests
        where = (
            f"on {self.listen[0]}:{self.port}"
            if self._server is not None
            else "behind the controller listener"
        )
        log.info("raft node %d serving %s (voters %s)", self.node_id, where, sorted(self.voters))

    async def stop(self, *, resign_timeout_ms: int | None = None) -> None:
        """Stop serving. A leader first resigns and waits (up to ``resign_timeout_ms``, by default
        ``controller.quorum.request.timeout.ms``) for the voters to hear it, so that one of them takes
        over at once instead of after a fetch timeout."""
        node = self.node
        if node is not None and self.failure is None and self._loop_task is not None:
            limit = self._clock_ms() + (
                resign_timeout_ms if resign_timeout_ms is not None else self.config.request_timeout_ms
            )
            self._dispatch(node.resign(self._clock_ms()))
            while not node.ready_to_stop(self._clock_ms()) and self._clock_ms() < limit:
                await asyncio.sleep(0.01)
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            try:
                await self._loop_task
            except Exception:
                pass
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        for peer in self._peers.values():
            await peer.close()
        if self._server is not None:
            await self._server.wait_closed()
        close = getattr(self.storage, "close", None)
        if close is not None and self.failure is None:
            close()

    # ------------------------------------------------------------------ the node's inputs

    def append(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        """``RaftNode.append`` on the loop (raises ``NotLeader`` elsewhere); returns the last offset."""
        offset = self.node.append(records, self._clock_ms(), epoch=epoch)
        self._wake.set()
        return offset

    def create_snapshot(self, offset: int):
        """``RaftNode.create_snapshot`` (for the listener: a writer, or None)."""
        return self.node.create_snapshot(offset, self._clock_ms())

    def describe_quorum(self) -> DescribeQuorumResponse:
        return self.node.describe_quorum(self._clock_ms())

    def _accepting(self) -> bool:
        """Whether the node takes inputs: not failed, and not stopped (while a leader resigns on
        the way out it still does)."""
        stopped = self._stopping and (self._loop_task is None or self._loop_task.done())
        return self.failure is None and self.node is not None and not stopped

    def _inbound(self, message: Inbound) -> None:
        if not self._accepting():
            return
        try:
            self._dispatch(self.node.handle(message, self._clock_ms()))
        except Exception as exc:
            self._fail(exc)

    def _request_failed(self, destination: int, correlation_id: int) -> None:
        if self._accepting():
            try:
                self._dispatch(self.node.request_failed(destination, correlation_id, self._clock_ms()))
            except Exception as exc:
                self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        log.critical("raft node %d stops: %r", self.node_id, exc, exc_info=exc)
        self.failure = exc
        self._stopping = True
        self._wake.set()

    async def _run(self) -> None:
        # A flag, not cancellation, ends the loop: before Python 3.12, asyncio.wait_for can swallow a
        # cancellation that arrives as its inner wait completes, and the loop would run on.
        try:
            while not self._stopping:
                self._wake.clear()
                self._sleep_until_ms = 0
                self._dispatch(self.node.poll(self._clock_ms()))
                self._sleep_until_ms = self._next_poll_ms
                delay = (self._next_poll_ms - self._clock_ms()) / 1000
                if self._stopping:
                    break
                if delay > 0:
                    waiter = asyncio.ensure_future(self._wake.wait())
                    try:
                        await asyncio.wait((waiter,), timeout=delay)
                    finally:
                        waiter.cancel()
                else:
                    await asyncio.sleep(0)
        except Exception as exc:
            self._fail(exc)

    def _dispatch(self, outputs: Outputs) -> None:
        for message in outputs.messages:
            self._send(message)
        if self.listener is not None and outputs.events:
            deliver(outputs.events, self.listener)
        self._next_poll_ms = (
            outputs.next_poll_ms if outputs.next_poll_ms < NEVER else self._clock_ms() + 60_000
        )
        if self._next_poll_ms < self._sleep_until_ms:
            self._wake.set()  # the loop sleeps past the node's next deadline

    def _send(self, message: Outbound) -> None:
        if message.is_response:
            writer, api_key, version = message.reply_to
            if writer.is_closing():
                return
            response = wire.response_to_wire(api_key, version, message.body)
            writer.write(apis.encode_response(response, message.correlation_id, version))
            return
        peer = self._peers.get(message.destination)
        if peer is None:
            self._request_failed(message.destination, message.correlation_id)
            return
        peer.send(message.correlation_id, message.body)

    # ------------------------------------------------------------------ the controller listener

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                frame = await _read_frame(reader)
                if not self._serve_frame(frame, writer):
                    break
        except (OSError, asyncio.IncompleteReadError, InvalidRequest):
            pass
        except asyncio.CancelledError:
            pass  # the server is stopping: nothing more to answer on this connection
        finally:
            self._connections.discard(writer)
            writer.close()

    def _serve_frame(self, frame: bytes, writer: asyncio.StreamWriter) -> bool:
        """Handle one request frame; False closes the connection (an unreadable frame or an API
        the controller listener does not serve, as Kafka does)."""
        api_key, version, correlation_id = apis.peek_request_header(frame)
        if api_key == wire.API_VERSIONS:
            writer.write(self._api_versions(frame, version, correlation_id))
            return True
        versions = wire.VERSIONS.get(api_key)
        if versions is None or not versions[0] <= version <= versions[1]:
            log.info(
                "controller listener of node %d: API %d v%d is not served", self.node_id, api_key, version
            )
            return False
        _header, message = apis.decode_request(frame, apis.request_class(api_key), version)
        try:
            body = wire.request_from_wire(api_key, message)
        except wire.WireError as exc:
            writer.write(
                apis.encode_response(wire.error_response(api_key, version, exc.code), correlation_id, version)
            )
            return True
        source = getattr(body, "candidate_id", getattr(body, "leader_id", getattr(body, "replica_id", -1)))
        self._inbound(Inbound(source, correlation_id, body, reply_to=(writer, api_key, version)))
        return True

    def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> bytearray:
        cls = apis.response_class(wire.API_VERSIONS)
        if not 0 <= version <= 3:
            return apis.unsupported_api_versions_response(correlation_id, 0, 3)
        keys = [cls.ApiVersion(api_key=18, min_version=0, max_version=3)]
        keys += [
            cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(wire.VERSIONS.items())
        ]
        response = cls(error_code=int(ErrorCode.NONE), api_keys=keys, throttle_time_ms=0)
        return apis.encode_response(response, correlation_id, version)
