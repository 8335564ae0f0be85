"""The asyncio side of a connection, driven without a server: a fake transport records what is written.

Checks the contracts ``server`` relies on: answers in request order whatever order the requests
finish in, ``None`` answers skipped, reading paused while too many answers are owed or the transport
is full, a handler failure closes the connection, and TCP_NODELAY on the accepted socket.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from onceflow.broker import client_protocol
from onceflow.broker.client_protocol import ClientProtocol, ThrottledAnswer
from onceflow.broker.connection import SupportedApi
from onceflow.broker.context import CloseConnection
from onceflow.broker.memory_pool import MemoryPool

SUPPORTED = {
    18: SupportedApi(18, 0, 4, ApiVersionsRequest),
    3: SupportedApi(3, 0, 13, MetadataRequest),
}


def frame(correlation_id: int) -> bytes:
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    request.API_VERSION = 12
    request.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(request.encode(header=True, framed=True))


class FakeTransport:
    def __init__(self, sock: socket.socket | None = None) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.aborted = False
        self.sock = sock

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 1), "socket": self.sock}.get(name, default)

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def abort(self) -> None:
        self.aborted = True


def feed(protocol: ClientProtocol, data: bytes) -> None:
    target = protocol.get_buffer(-1)
    target[: len(data)] = data
    protocol.buffer_updated(len(data))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def make(dispatch, transport: FakeTransport) -> ClientProtocol:
    closed: list[ClientProtocol] = []
    protocol = ClientProtocol(dispatch, SUPPORTED, max_request_bytes=1 << 20, on_close=closed.append)
    protocol.connection_made(transport)
    return protocol


def test_answers_leave_in_request_order_whatever_order_requests_finish_in():
    async def scenario():
        gates = {i: asyncio.Event() for i in range(1, 6)}

        async def dispatch(event):
            cid = event.header.correlation_id
            await gates[cid].wait()
            return None if cid == 3 else b"answer-%d" % cid

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, b"".join(frame(i) for i in range(1, 6)))
        await settle()
        for cid in (5, 2, 4):
            gates[cid].set()
        await settle()
        assert transport.written == []  # request 1 still owes its answer
        gates[1].set()
        await settle()
        assert transport.written == [b"answer-1", b"answer-2"]  # 3 still running
        gates[3].set()  # answers nothing (acks=0): the later answers follow at once
        await settle()
        assert transport.written == [b"answer-1", b"answer-2", b"answer-4", b"answer-5"]

    asyncio.run(scenario())


def test_reading_pauses_while_too_many_answers_are_owed_or_the_transport_is_full(monkeypatch):
    monkeypatch.setattr(client_protocol, "MAX_QUEUED_REQUESTS", 3)

    async def scenario():
        release = asyncio.Event()
        started: list[int] = []

        async def dispatch(event):
            started.append(event.header.correlation_id)
            await release.wait()
            return b"a%d" % event.header.correlation_id

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, b"".join(frame(i) for i in range(1, 6)))
        await settle()
        assert not transport.reading and started == [1, 2, 3]  # 4 and 5 wait, already read
        release.set()
        await settle()
        assert started == [1, 2, 3, 4, 5] and transport.reading
        assert transport.written == [b"a1", b"a2", b"a3", b"a4", b"a5"]
        protocol.pause_writing()
        assert not transport.reading
        feed(protocol, frame(6))  # a read already under way when we paused
        await settle()
        assert transport.written[-1] == b"a5"  # held while the transport is full
        protocol.resume_writing()
        await settle()
        assert transport.written[-1] == b"a6" and transport.reading

    asyncio.run(scenario())


def test_requests_already_read_wait_while_made_answers_pass_the_byte_bound(monkeypatch):
    """A client pipelining fetches it does not read must not make the broker build every answer."""
    monkeypatch.setattr(client_protocol, "MAX_UNWRITTEN_ANSWER_BYTES", 10)

    async def scenario():
        first = asyncio.Event()
        started: list[int] = []

        async def dispatch(event):
            cid = event.header.correlation_id
            started.append(cid)
            if cid == 1:
                await first.wait()  # the head owes its answer, so the later ones cannot leave
            return b"answer-%d" % cid  # 8 bytes

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, b"".join(frame(i) for i in range(1, 6)))
        await settle()
        assert started == [1, 2, 3]  # 16 answer bytes made: 4 and 5 wait, already read
        assert not transport.reading and transport.written == []
        first.set()
        await settle()
        assert started == [1, 2, 3, 4, 5] and transport.reading
        assert transport.written == [b"answer-%d" % i for i in range(1, 6)]

    asyncio.run(scenario())


def test_no_request_is_started_while_the_transport_is_full():
    async def scenario():
        started: list[int] = []

        async def dispatch(event):
            started.append(event.header.correlation_id)
            return b"a%d" % event.header.correlation_id

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        protocol.pause_writing()
        feed(protocol, b"".join(frame(i) for i in range(1, 4)))  # read before the pause took effect
        await settle()
        assert started == [] and transport.written == []
        protocol.resume_writing()
        await settle()
        assert started == [1, 2, 3] and transport.written == [b"a1", b"a2", b"a3"]

    asyncio.run(scenario())


def test_requests_held_back_start_once_answers_leave_without_more_bytes_from_the_client(monkeypatch):
    """Room made by writing answers starts the requests still buffered: the client, waiting for
    their answers, sends nothing more to wake us."""
    monkeypatch.setattr(client_protocol, "MAX_QUEUED_REQUESTS", 2)

    async def scenario():
        async def dispatch(event):
            return b"a%d" % event.header.correlation_id

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, b"".join(frame(i) for i in range(1, 6)))
        await settle()
        assert transport.written == [b"a1", b"a2", b"a3", b"a4", b"a5"] and transport.reading

    asyncio.run(scenario())


def test_a_close_or_a_failing_handler_aborts_after_the_earlier_answers():
    for failure in (CloseConnection("acks=0 produce failed"), RuntimeError("handler bug")):

        async def scenario(failure=failure):
            async def dispatch(event):
                if event.header.correlation_id == 2:
                    raise failure
                return b"a%d" % event.header.correlation_id

            transport = FakeTransport()
            protocol = make(dispatch, transport)
            feed(protocol, frame(1) + frame(2) + frame(3))
            await settle()
            assert transport.written == [b"a1"] and transport.aborted

        asyncio.run(scenario())


def test_an_undecodable_frame_aborts_and_eof_cancels_running_requests():
    async def scenario():
        async def never(_event):
            await asyncio.Event().wait()

        transport = FakeTransport()
        protocol = make(never, transport)
        feed(protocol, struct.pack(">i", -1))
        assert transport.aborted

        transport = FakeTransport()
        protocol = make(never, transport)
        feed(protocol, frame(1))
        await settle()
        protocol.eof_received()
        assert transport.aborted
        protocol.connection_lost(None)
        await settle()
        assert protocol.closed.done()

    asyncio.run(scenario())


def test_accepted_sockets_have_tcp_nodelay():
    async def scenario():
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        try:
            accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
            make(lambda _e: None, FakeTransport(accepted))
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            for s in (client, accepted, listener):
                s.close()

    asyncio.run(scenario())


def test_a_connection_the_memory_pool_refuses_stops_reading_until_requests_finish_elsewhere():
    async def scenario():
        loop = asyncio.get_running_loop()
        pool = MemoryPool(1 << 20, schedule=loop.call_soon)
        pool.take(1 << 20)  # other connections' requests fill it
        release = asyncio.Event()

        async def dispatch(event):
            await release.wait()
            return b"a%d" % event.header.correlation_id

        transport = FakeTransport()
        protocol = ClientProtocol(
            dispatch, SUPPORTED, max_request_bytes=1 << 20, on_close=lambda _: None, pool=pool
        )
        protocol.connection_made(transport)
        feed(protocol, frame(1) + frame(2))
        await settle()
        assert not transport.reading and pool.waiting == 1  # stopped, queued in the pool
        pool.release(1 << 20)  # those requests finished
        await settle()
        assert transport.reading and pool.waiting == 0
        assert pool.used == 2 * (len(frame(1)) - 4)  # both requests' frames, held while they run
        release.set()
        await settle()
        assert transport.written == [b"a1", b"a2"]
        assert pool.used == 0  # given back once handled

    asyncio.run(scenario())


def test_a_connection_lost_while_waiting_for_memory_leaves_the_pool_as_it_was():
    async def scenario():
        loop = asyncio.get_running_loop()
        pool = MemoryPool(1 << 20, schedule=loop.call_soon)
        pool.take(1 << 20)

        async def dispatch(event):
            return b"a"

        transport = FakeTransport()
        protocol = ClientProtocol(
            dispatch, SUPPORTED, max_request_bytes=1 << 20, on_close=lambda _: None, pool=pool
        )
        protocol.connection_made(transport)
        feed(protocol, frame(1))
        await settle()
        assert pool.waiting == 1
        pool.release(1 << 20)  # the grant is on its way (scheduled) when the connection goes
        protocol.connection_lost(None)
        await settle()
        assert pool.used == 0 and pool.waiting == 0 and transport.written == []

    asyncio.run(scenario())


def test_a_throttled_answer_goes_out_at_once_and_mutes_the_connection_for_its_throttle_time():
    async def scenario():
        started: list[int] = []

        async def dispatch(event):
            started.append(event.header.correlation_id)
            answer = b"a%d" % event.header.correlation_id
            return ThrottledAnswer(answer, 200) if event.header.correlation_id == 1 else answer

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1) + frame(2))  # pipelined: the second waits out the first's throttle
        await settle()
        assert transport.written == [b"a1"] and started == [1] and not transport.reading
        await asyncio.sleep(0.3)
        await settle()
        assert transport.written == [b"a1", b"a2"] and transport.reading

    asyncio.run(scenario())
