"""The sans-IO frame decoder: partial frames, pipelined frames, oversized and garbage input."""

from __future__ import annotations

import struct

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from onceflow.broker.connection import (
    INITIAL_RECEIVE_BUFFER_BYTES,
    NEED_DATA,
    RECEIVE_BUFFER_BYTES,
    Connection,
    ConnectionBroken,
    RequestReceived,
    SupportedApi,
    UnsupportedApiVersionsRequest,
)

SUPPORTED = {
    18: SupportedApi(18, 0, 4, ApiVersionsRequest),
    3: SupportedApi(3, 0, 13, MetadataRequest),
}


def frame(request, version: int, correlation_id: int = 1) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(request.encode(header=True, framed=True))


def metadata_frame(correlation_id: int = 1, version: int = 12) -> bytes:
    return frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), version, correlation_id)


def test_partial_frame_waits_for_the_rest_byte_by_byte():
    data = metadata_frame(correlation_id=7)
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    for byte in data[:-1]:
        conn.receive_data(bytes([byte]))
        assert conn.next_event() is NEED_DATA
    conn.receive_data(data[-1:])
    event = conn.next_event()
    assert isinstance(event, RequestReceived)
    assert event.header.correlation_id == 7
    assert event.header.client_id == "t"
    assert event.request.topics is None
    assert conn.next_event() is NEED_DATA
    assert conn.buffered_bytes == 0


def test_pipelined_frames_in_one_chunk_come_out_in_order():
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    conn.receive_data(b"".join(metadata_frame(i, version=v) for i, v in ((1, 0), (2, 9), (3, 13))))
    ids = []
    while (event := conn.next_event()) is not NEED_DATA:
        ids.append((event.header.correlation_id, event.header.api_version))
    assert ids == [(1, 0), (2, 9), (3, 13)]


def test_oversized_frame_breaks_before_the_body_arrives():
    conn = Connection(SUPPORTED, max_request_bytes=100)
    conn.receive_data(struct.pack(">i", 101))
    event = conn.next_event()
    assert isinstance(event, ConnectionBroken)
    assert "socket.request.max.bytes" in event.reason
    conn.receive_data(metadata_frame())  # nothing after a broken frame is read
    assert conn.next_event() == event


def test_negative_and_zero_sizes_break():
    for size in (-1, 0):
        conn = Connection(SUPPORTED, max_request_bytes=100)
        conn.receive_data(struct.pack(">i", size) + b"\x00" * 8)
        assert isinstance(conn.next_event(), ConnectionBroken)


def test_garbage_body_breaks():
    # A valid header prefix for Metadata v12 followed by bytes that are not a body.
    body = struct.pack(">hhih", 3, 12, 9, 1) + b"t" + b"\x00" + b"\xff\xff\xff\xff\xff"
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    conn.receive_data(struct.pack(">i", len(body)) + body)
    assert isinstance(conn.next_event(), ConnectionBroken)


def test_truncated_header_breaks():
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    conn.receive_data(struct.pack(">i", 5) + b"\x00\x03\x00\x01\x00")
    assert isinstance(conn.next_event(), ConnectionBroken)


def test_unknown_api_key_and_unsupported_version_break():
    for key, version in ((9999, 0), (3, 14)):
        body = struct.pack(">hhih", key, version, 1, -1)
        conn = Connection(SUPPORTED, max_request_bytes=1000)
        conn.receive_data(struct.pack(">i", len(body)) + body)
        assert isinstance(conn.next_event(), ConnectionBroken)


def test_api_versions_above_our_max_is_answerable():
    body = struct.pack(">hhih", 18, 77, 42, -1) + b"\x00whatever-a-future-body-is"
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    conn.receive_data(struct.pack(">i", len(body)) + body)
    assert conn.next_event() == UnsupportedApiVersionsRequest(correlation_id=42, api_version=77)
    conn.receive_data(frame(ApiVersionsRequest(), 0, correlation_id=43))
    event = conn.next_event()
    assert isinstance(event, RequestReceived) and event.header.correlation_id == 43


def test_flexible_header_tagged_fields_are_skipped():
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    conn = Connection(SUPPORTED, max_request_bytes=1000)
    conn.receive_data(frame(request, 3, correlation_id=5))
    event = conn.next_event()
    assert isinstance(event, RequestReceived)
    assert event.request.client_software_name == "x"


def _big_metadata_frame(correlation_id: int, topics: int) -> bytes:
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=f"topic-{i:05d}") for i in range(topics)],
        allow_auto_topic_creation=False,
    )
    return frame(request, 8, correlation_id)


def _read_like_a_socket(conn: Connection, data: bytes, chunk: int) -> list:
    """Feed ``data`` through get_buffer/buffer_updated at most ``chunk`` bytes per read, draining
    events after each read as the broker's protocol does."""
    events = []
    pos = 0
    while pos < len(data):
        target = conn.get_buffer(-1)
        assert len(target) > 0
        count = min(len(target), chunk, len(data) - pos)
        target[:count] = data[pos : pos + count]
        conn.buffer_updated(count)
        pos += count
        while (event := conn.next_event()) is not NEED_DATA:
            events.append(event)
    return events


def test_a_frame_bigger_than_the_receive_buffer_is_read_into_its_own_buffer():
    big = _big_metadata_frame(1, 3000)  # ~39 KB, more than the 4 KB receive buffer below
    small = metadata_frame(2)
    conn = Connection(SUPPORTED, max_request_bytes=1 << 20, receive_buffer_bytes=4096)
    first = conn.get_buffer(-1)
    first[:100] = big[:100]
    conn.buffer_updated(100)
    assert conn.next_event() is NEED_DATA
    # The rest of the frame goes straight into a buffer of its own: 16 KiB for the 96 bytes that came
    # (it grows with what arrives), never past the frame's end.
    assert len(conn.get_buffer(-1)) == 16 * 1024 - 96
    events = _read_like_a_socket(conn, big[100:] + small + small, chunk=1500)
    assert [e.header.correlation_id for e in events] == [1, 2, 2]
    assert len(events[0].request.topics) == 3000
    assert events[0].size == len(big) - 4
    assert conn.buffered_bytes == 0


def test_pipelined_frames_of_mixed_sizes_survive_any_read_size():
    frames = [_big_metadata_frame(i, 500 * (i % 3)) if i % 2 else metadata_frame(i) for i in range(1, 13)]
    data = b"".join(frames)
    for chunk in (1, 7, 1000, 5000, len(data)):
        conn = Connection(SUPPORTED, max_request_bytes=1 << 20, receive_buffer_bytes=4096)
        events = _read_like_a_socket(conn, data, chunk)
        assert [e.header.correlation_id for e in events] == list(range(1, 13)), chunk
        assert conn.buffered_bytes == 0


def test_many_frames_fed_at_once_grow_the_receive_buffer():
    data = b"".join(metadata_frame(i) for i in range(1, 301))
    conn = Connection(SUPPORTED, max_request_bytes=1000, receive_buffer_bytes=1024)
    conn.receive_data(data)  # no next_event between reads: the buffer must grow, not overflow
    ids = []
    while (event := conn.next_event()) is not NEED_DATA:
        ids.append(event.header.correlation_id)
    assert ids == list(range(1, 301))


def test_the_receive_buffer_starts_small_and_grows_only_while_reads_fill_it():
    conn = Connection(SUPPORTED, max_request_bytes=1 << 20)
    assert len(conn.get_buffer(-1)) == INITIAL_RECEIVE_BUFFER_BYTES  # an idle connection's memory
    # A client that sends a request at a time never fills it: the buffer stays as it is.
    _read_like_a_socket(conn, b"".join(metadata_frame(i) for i in range(1, 200)), chunk=500)
    assert len(conn.get_buffer(-1)) == INITIAL_RECEIVE_BUFFER_BYTES
    # Pipelined requests fill every read: each full read doubles the room, up to the maximum.
    data = b"".join(metadata_frame(i) for i in range(1, 40_000))
    events = _read_like_a_socket(conn, data, chunk=len(data))
    assert [e.header.correlation_id for e in events] == list(range(1, 40_000))
    assert len(conn.get_buffer(-1)) == RECEIVE_BUFFER_BYTES
