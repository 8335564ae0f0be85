"""Connection framing, version negotiation and pipelining, against a scripted in-process server."""

import asyncio
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from onceflow.client.admin import AsyncAdminClient
from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.producer.produce_wire import PartitionResult, ProduceRequestFrame
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode, KafkaError, UnsupportedVersion

# What the scripted broker advertises: ApiVersions only up to v2, Metadata 0-9, nothing else.
ADVERTISED = {18: (0, 2), 3: (0, 9)}


class ScriptedBroker:
    """Answers ApiVersions; holds Metadata requests until ``hold`` of them arrived, then answers them
    in reverse order (so correlation ids, not arrival order, must match them up). The first ``ignore``
    Metadata requests (over all connections) are never answered: a broker that stopped answering.
    With a ``gate``, ApiVersions is answered only once the gate is set (a connection still opening),
    on the connections after the first ``gate_after``. With ``advertise`` its Metadata answers name it
    as broker 0 (so a client connects to it again by that address)."""

    def __init__(
        self,
        hold: int = 1,
        close_on_metadata: bool = False,
        ignore: int = 0,
        gate: asyncio.Event | None = None,
        gate_after: int = 0,
        advertise: bool = False,
    ) -> None:
        self.hold = hold
        self.close_on_metadata = close_on_metadata
        self.ignore = ignore
        self.gate = gate
        self.gate_after = gate_after
        self.advertise = advertise
        self.seen: list[tuple[int, int]] = []  # (api_key, api_version) of each request
        self.connections = 0  # accepted so far
        self.disconnects = 0  # connections the client closed
        self.server: asyncio.Server | None = None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        held = []
        self.connections += 1
        number = self.connections
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = apis.peek_request_header(frame)
                self.seen.append((api_key, version))
                if api_key == 18:
                    if self.gate is not None and number > self.gate_after:
                        await self.gate.wait()
                    writer.write(self._api_versions(version, correlation_id))
                elif api_key == 3 and self.close_on_metadata:
                    return  # the connection dies with the request unanswered
                elif api_key == 3 and self.ignore:
                    self.ignore -= 1  # never answered
                elif api_key == 3:
                    held.append((correlation_id, version))
                    if len(held) == self.hold:
                        for cid, v in reversed(held):
                            response = MetadataResponse(
                                throttle_time_ms=0,
                                brokers=[
                                    MetadataResponse.MetadataResponseBroker(
                                        node_id=0, host="127.0.0.1", port=self.port, rack=None
                                    )
                                ]
                                if self.advertise
                                else [],
                                cluster_id=f"cid-{cid}",
                                controller_id=0,
                                topics=[],
                            )
                            writer.write(apis.encode_response(response, cid, v))
                        held.clear()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.disconnects += 1
        finally:
            writer.close()

    def _api_versions(self, version: int, correlation_id: int) -> bytes:
        low, high = ADVERTISED[18]
        if version > high:
            return bytes(apis.unsupported_api_versions_response(correlation_id, low, high))
        keys = [
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in ADVERTISED.items()
        ]
        response = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
        return bytes(apis.encode_response(response, correlation_id, version))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_negotiates_down_and_picks_highest_common_version():
    async def scenario():
        async with ScriptedBroker() as broker:
            conn = await Connection.open("127.0.0.1", broker.port)
            try:
                assert conn.broker_versions == ADVERTISED
                assert conn.version_for(MetadataRequest) == 9
                response = await conn.send(MetadataRequest(topics=None))
                assert response.cluster_id.startswith("cid-")
                with pytest.raises(UnsupportedVersion, match="does not support"):
                    conn.version_for(ProduceRequest)
            finally:
                await conn.close()
            # First ApiVersions at our max (3) got UNSUPPORTED_VERSION, the retry went at 2.
            assert broker.seen[:2] == [(18, 3), (18, 2)]
            assert broker.seen[2] == (3, 9)

    run(scenario())


def test_pipelined_requests_are_matched_by_correlation_id():
    async def scenario():
        async with ScriptedBroker(hold=5) as broker:
            conn = await Connection.open("127.0.0.1", broker.port)
            try:
                requests = [MetadataRequest(topics=None) for _ in range(5)]
                responses = await asyncio.gather(*(conn.send(r) for r in requests))
                # Each response carries the correlation id its request was sent with.
                assert [r.cluster_id for r in responses] == [
                    f"cid-{req.header.correlation_id}" for req in requests
                ]
                assert len({r.cluster_id for r in responses}) == 5
            finally:
                await conn.close()

    run(scenario())


def test_connection_refused_is_a_clear_error():
    async def scenario():
        async with ScriptedBroker() as broker:
            port = broker.port
        with pytest.raises(BrokerConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
            await Connection.open("127.0.0.1", port)

    run(scenario())


def test_broker_closing_fails_waiting_requests():
    async def scenario():
        async with ScriptedBroker(close_on_metadata=True) as broker:
            conn = await Connection.open("127.0.0.1", broker.port)
            try:
                with pytest.raises(BrokerConnectionError, match="lost connection"):
                    await conn.send(MetadataRequest(topics=None))
                assert conn.closed
                with pytest.raises(BrokerConnectionError, match="closed"):
                    await conn.send(MetadataRequest(topics=None))
            finally:
                await conn.close()

    run(scenario())


def test_a_connection_the_broker_closed_lets_go_of_its_socket_without_close():
    """The read loop's EOF fails the connection; its socket must close then, not when someone calls
    close() or the garbage collector finds the object (the caller here still holds it)."""

    async def scenario():
        async with ScriptedBroker(close_on_metadata=True) as broker:
            conn = await Connection.open("127.0.0.1", broker.port)
            sock = conn._writer.get_extra_info("socket")
            assert sock.fileno() != -1
            try:
                with pytest.raises(BrokerConnectionError, match="lost connection"):
                    await conn.send(MetadataRequest(topics=None))
                assert conn.closed
                for _ in range(100):  # loop turns, not time: the transport closes the socket soon
                    if sock.fileno() == -1:
                        break
                    await asyncio.sleep(0)
                assert sock.fileno() == -1
                assert conn._read_task.done()
            finally:
                await conn.close()

    run(scenario())


def test_a_closed_client_refuses_requests_and_opens_nothing():
    async def scenario():
        async with ScriptedBroker() as broker:
            client = AsyncClient(f"127.0.0.1:{broker.port}")
            await client.metadata()
            await client.close()
            assert client.closed
            with pytest.raises(BrokerConnectionError, match="the client is closed"):
                await client.metadata()
            with pytest.raises(BrokerConnectionError, match="the client is closed"):
                await client.any_connection()
            return client, broker.connections

    client, connections = run(scenario())
    assert connections == 1
    assert client.connections() == []


def test_a_connection_opening_while_the_client_closes_is_closed_and_the_request_fails():
    """A request racing close() (e.g. a metadata refresh) must not leave a connection nobody closes."""

    async def scenario():
        gate = asyncio.Event()
        async with ScriptedBroker(gate=gate) as broker:
            client = AsyncClient(f"127.0.0.1:{broker.port}")
            racing = asyncio.create_task(client.metadata())
            while not broker.seen:  # connected; ApiVersions waits at the gate
                await asyncio.sleep(0.01)
            await client.close()
            gate.set()
            with pytest.raises(BrokerConnectionError, match="the client is closed"):
                await racing
            while broker.disconnects < 1:  # the connection it opened is closed
                await asyncio.sleep(0.01)
            return client, broker

    client, broker = run(scenario())
    assert broker.connections == 1
    assert {key for key, _version in broker.seen} == {18}  # ApiVersions only: no Metadata went out
    assert client.connections() == []


def test_a_closed_admin_client_refuses_calls_and_opens_nothing():
    """The admin client's own connections (to leaders and coordinators) follow its closed state."""

    async def scenario():
        async with ScriptedBroker(advertise=True) as broker:
            admin = AsyncAdminClient(f"127.0.0.1:{broker.port}")
            await admin.describe_topics()
            await admin.close()
            assert admin.closed
            with pytest.raises(BrokerConnectionError, match="client is closed"):
                await admin.list_groups()
            # A call that got past its metadata before close() connects to the leader here.
            with pytest.raises(BrokerConnectionError, match="admin client is closed"):
                await admin._conn_to("127.0.0.1", broker.port)
            return admin, broker.connections

    admin, connections = run(scenario())
    assert connections == 1
    assert admin._extra == {}


def test_an_admin_connection_opening_while_the_admin_client_closes_is_closed_and_the_call_fails():
    """A call racing close() (here ListGroups, connecting to the broker its metadata named) must not
    leave a connection nobody closes, nor send its request."""

    async def scenario():
        gate = asyncio.Event()
        async with ScriptedBroker(gate=gate, gate_after=1, advertise=True) as broker:
            admin = AsyncAdminClient(f"127.0.0.1:{broker.port}")
            racing = asyncio.create_task(admin.list_groups())
            # Metadata answered on the bootstrap connection; the admin's own connection (to the
            # broker that metadata named) waits at the gate for its ApiVersions answer.
            while broker.connections < 2 or len(broker.seen) < 4:
                await asyncio.sleep(0.01)
            await admin.close()
            gate.set()
            with pytest.raises(BrokerConnectionError, match="admin client is closed"):
                await racing
            while broker.disconnects < 2:  # the bootstrap connection and the one opened late
                await asyncio.sleep(0.01)
            return admin, broker

    admin, broker = run(scenario())
    assert broker.connections == 2
    # ApiVersions (v3, refused, then v2) on each connection, Metadata on the first: no ListGroups.
    assert [key for key, _version in broker.seen] == [18, 18, 3, 18, 18]
    assert admin._extra == {}


class _RecordingTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _RecordingWriter:
    """Enough of a StreamWriter for a Connection whose reader the test feeds by hand."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.transport = _RecordingTransport()

    def write(self, data: bytes) -> None:
        self.frames.append(bytes(data))

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


def test_cancel_as_the_response_arrives_still_cancels_send():
    """Python 3.11's asyncio.wait_for returns the result and drops a task.cancel() that comes in the
    same loop iteration as the response; send() must stay cancelled (a stopping fetch loop hung)."""

    async def scenario():
        reader = asyncio.StreamReader()
        writer = _RecordingWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="t", request_timeout_s=30.0)
        try:
            task = asyncio.create_task(conn.send(MetadataRequest(topics=None), version=9))
            while not writer.frames:
                await asyncio.sleep(0)
            _key, _version, correlation_id = apis.peek_request_header(writer.frames[0][4:])
            response = MetadataResponse(
                throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0, topics=[]
            )
            reader.feed_data(bytes(apis.encode_response(response, correlation_id, 9)))
            # One turn: the read loop decodes the frame and resolves send()'s future; send() itself
            # has not resumed yet when the cancel arrives.
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
        finally:
            await conn.close()

    run(scenario())


def test_unanswered_request_times_out_with_request_timed_out_and_closes_the_connection():
    """Kafka's NetworkClient disconnects a node whose request timed out: the request fails with
    REQUEST_TIMED_OUT, the transport is aborted, and nothing more goes on this connection (a late
    answer would have nowhere to go; the caller opens a new connection)."""

    async def scenario():
        reader = asyncio.StreamReader()
        writer = _RecordingWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="t", request_timeout_s=0.05)
        try:
            with pytest.raises(KafkaError) as info:
                await conn.send(MetadataRequest(topics=None), version=9)
            assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
            assert "timed out" in str(info.value)
            assert conn._pending == {}
            assert conn.closed
            assert writer.transport.aborted
            with pytest.raises(BrokerConnectionError, match="is closed: MetadataRequest v9 got no answer"):
                await conn.send(MetadataRequest(topics=None), version=9)
            assert len(writer.frames) == 1  # the second request was never written
        finally:
            await conn.close()

    run(scenario())


def test_a_timeout_fails_the_other_pending_requests_with_a_connection_error():
    """Every request in flight on the connection fails when one times out, not only the one that
    did: they fail as disconnected (BrokerConnectionError), so their callers retry elsewhere."""

    async def scenario():
        async with ScriptedBroker(ignore=2) as broker:
            conn = await Connection.open("127.0.0.1", broker.port, request_timeout_s=0.2)
            try:
                first = asyncio.create_task(conn.send(MetadataRequest(topics=None)))
                while len(broker.seen) < 3:  # ApiVersions twice, then the Metadata request
                    await asyncio.sleep(0.01)
                conn.request_timeout_s = 30.0  # the second one has a long way to its own timeout
                second = asyncio.create_task(conn.send(MetadataRequest(topics=None)))
                with pytest.raises(KafkaError) as timed_out:
                    await first
                with pytest.raises(BrokerConnectionError, match="lost connection") as disconnected:
                    await second
                assert conn.closed
                while broker.disconnects < 1:  # the broker sees the connection go
                    await asyncio.sleep(0.01)
            finally:
                await conn.close()
            return timed_out.value, disconnected.value

    timed_out, disconnected = run(scenario())
    assert timed_out.code == ErrorCode.REQUEST_TIMED_OUT
    assert not isinstance(timed_out, BrokerConnectionError)
    assert disconnected.code == ErrorCode.NETWORK_EXCEPTION
    assert "MetadataRequest v9 got no answer within the request timeout (0.2s)" in str(disconnected)


def test_after_a_timeout_the_client_opens_a_new_connection_for_the_next_request():
    async def scenario():
        async with ScriptedBroker(ignore=1) as broker:
            async with AsyncClient(f"127.0.0.1:{broker.port}", request_timeout_s=0.2) as client:
                stale = await client.any_connection()
                with pytest.raises(KafkaError) as info:
                    await client.metadata()
                assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
                assert stale.closed
                metadata = await client.metadata()  # answered, on a connection of its own
                fresh = await client.any_connection()
                assert fresh is not stale and not fresh.closed
            return metadata, broker.connections

    metadata, connections = run(scenario())
    assert metadata.cluster_id.startswith("cid-")
    assert connections == 2


def test_a_late_answer_to_an_abandoned_request_is_dropped_quietly_and_a_stranger_is_reported(caplog):
    empty = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0, topics=[])

    async def scenario():
        reader = asyncio.StreamReader()
        writer = _RecordingWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="t", request_timeout_s=30)
        try:
            cancelled = asyncio.create_task(conn.send(MetadataRequest(topics=None), version=9))
            while not writer.frames:
                await asyncio.sleep(0)
            cancelled.cancel()  # e.g. a consumer closing while its heartbeat is on the wire
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            _key, _version, late_id = apis.peek_request_header(writer.frames[0][4:])
            with caplog.at_level("DEBUG", logger="onceflow.client.connection"):
                reader.feed_data(bytes(apis.encode_response(empty, late_id, 9)))
                reader.feed_data(bytes(apis.encode_response(empty, late_id + 1000, 9)))
                for _ in range(20):
                    await asyncio.sleep(0)
        finally:
            await conn.close()
        return late_id

    late_id = run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"dropping response with unknown correlation id {late_id + 1000}"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"] == [
        f"dropping the late answer to abandoned request {late_id}"
    ]


def _produce_answer(partition: int, base_offset: int, correlation_id: int, version: int) -> bytes:
    """A broker's framed ProduceResponse: success for topic "t", ``partition`` at ``base_offset``."""
    P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    done = P(
        index=partition,
        error_code=0,
        base_offset=base_offset,
        log_append_time_ms=-1,
        log_start_offset=0,
        record_errors=[],
        error_message=None,
    )
    topic = ProduceResponse.TopicProduceResponse(name="t", partition_responses=[done])
    response = ProduceResponse(responses=[topic], throttle_time_ms=0)
    return bytes(apis.encode_response(response, correlation_id, version))


def test_send_frame_writes_the_request_bytes_and_reads_the_answer_with_its_decoder():
    async def scenario():
        reader = asyncio.StreamReader()
        writer = _RecordingWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="me", request_timeout_s=30.0)
        try:
            request = ProduceRequestFrame(9, None, -1, 1000, [("t", 2, b"\x00" * 61)])
            task = asyncio.create_task(conn.send_frame(request))
            while not writer.frames:
                await asyncio.sleep(0)
            key, version, correlation_id = apis.peek_request_header(writer.frames[0][4:])
            assert (key, version) == (0, 9)
            assert writer.frames[0] == request.encode(correlation_id, "me")
            reader.feed_data(_produce_answer(2, 41, correlation_id, 9))
            assert await task == [PartitionResult("t", 2, 0, 41, -1, None)]
            # acks=0: written, nothing awaited.
            assert await conn.send_frame(ProduceRequestFrame(9, None, 0, 1000, [("t", 2, b"")])) is None
            assert conn._pending == {}
        finally:
            await conn.close()

    run(scenario())


def test_submit_frame_returns_a_future_of_the_answer_or_of_the_error():
    async def scenario():
        reader = asyncio.StreamReader()
        writer = _RecordingWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="me", request_timeout_s=30.0)
        try:
            answered = conn.submit_frame(ProduceRequestFrame(12, None, -1, 1000, [("t", 0, b"\x01" * 61)]))
            unanswered = conn.submit_frame(ProduceRequestFrame(12, None, 0, 1000, [("t", 0, b"\x02" * 61)]))
            assert len(writer.frames) == 2  # written at once, no await needed
            assert unanswered.done() and unanswered.result() is None
            assert not answered.done()
            _key, _version, correlation_id = apis.peek_request_header(writer.frames[0][4:])
            reader.feed_data(_produce_answer(0, 7, correlation_id, 12))
            assert await answered == [PartitionResult("t", 0, 0, 7, -1, None)]
            in_flight = conn.submit_frame(ProduceRequestFrame(12, None, -1, 1000, [("t", 0, b"")]))
        finally:
            await conn.close()
        # Closing fails what is in flight, and what is submitted afterwards.
        with pytest.raises(BrokerConnectionError):
            await in_flight
        with pytest.raises(BrokerConnectionError):
            await conn.submit_frame(ProduceRequestFrame(12, None, -1, 1000, [("t", 0, b"")]))

    run(scenario())
