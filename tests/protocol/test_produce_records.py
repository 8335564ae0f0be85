"""Produce records as views of the request frame: same bytes as kafka-python decodes, every version we
serve, writable into the frame; anything unexpected leaves kafka-python's copies alone."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.producer import ProduceRequest

from onceflow.protocol.apis import RECORD_VIEWS_MIN_BYTES, decode_request
from onceflow.protocol.produce_records import attach_record_views, decode_produce_request

PD = ProduceRequest.TopicProduceData
PPD = PD.PartitionProduceData


def _request(transactional_id: str | None) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            PD(
                name="alpha",
                partition_data=[PPD(index=0, records=b"a" * 70), PPD(index=3, records=b"b" * 300)],
            ),
            PD(name="beta-topic", partition_data=[PPD(index=1, records=b"")]),
            PD(name="gamma", partition_data=[PPD(index=2, records=bytes(range(256)) * 1100)]),
        ],
    )


def _frame(request: ProduceRequest, version: int) -> bytearray:
    request.API_VERSION = version
    request.with_header(correlation_id=7, client_id="client")
    return bytearray(request.encode(header=True))


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_records_are_writable_views_of_the_frame_at_every_version(version, transactional_id):
    frame = _frame(_request(transactional_id), version)
    _header, body = decode_request(frame, ProduceRequest, version)
    expected = [[bytes(p.records) for p in t.partition_data] for t in _request(transactional_id).topic_data]
    got = [[p.records for p in t.partition_data] for t in body.topic_data]
    assert all(isinstance(r, memoryview) and not r.readonly for t in got for r in t)
    assert [[bytes(r) for r in t] for t in got] == expected
    # A view, not a copy: writing through it changes the frame.
    view = got[2][0]
    view[0:4] = b"WXYZ"
    assert b"WXYZ" in frame


def test_null_records_stay_null():
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[PD(name="t", partition_data=[PPD(index=0, records=None), PPD(index=1, records=b"xy")])],
    )
    for version in (3, 9):
        frame = _frame(request, version)
        header, body = decode_request(bytes(frame), ProduceRequest, version)
        assert attach_record_views(body, frame, header.body_offset, version)
        built = decode_produce_request(frame, header.body_offset, version)
        for decoded in (body, built):
            first, second = decoded.topic_data[0].partition_data
            assert first.records is None
            assert bytes(second.records) == b"xy" and isinstance(second.records, memoryview)


def test_small_requests_keep_their_copies():
    # Locating records costs more than copying a few KB; decode_request only does it for big frames.
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[PD(name="t", partition_data=[PPD(index=0, records=b"z" * 1000)])],
    )
    frame = _frame(request, 9)
    assert len(frame) < RECORD_VIEWS_MIN_BYTES
    _header, body = decode_request(frame, ProduceRequest, 9)
    assert body.topic_data[0].partition_data[0].records == b"z" * 1000
    assert isinstance(body.topic_data[0].partition_data[0].records, bytes)


def test_a_frame_that_does_not_match_the_decoded_request_is_left_alone():
    version = 9
    frame = _frame(_request(None), version)
    header, body = decode_request(bytes(frame), ProduceRequest, version)  # bytes: no views
    assert isinstance(body.topic_data[0].partition_data[0].records, bytes)
    start = header.body_offset
    assert not attach_record_views(body, frame, start + 1, version)  # a shifted layout
    assert not attach_record_views(body, frame[:-1000], start, version)  # truncated
    body.topic_data[1].partition_data[0].index = 5  # the decoded request disagrees with the frame
    assert not attach_record_views(body, frame, start, version)
    assert isinstance(body.topic_data[0].partition_data[0].records, bytes)
    body.topic_data[1].partition_data[0].index = 1
    assert attach_record_views(body, frame, start, version)  # now it matches
    assert isinstance(body.topic_data[0].partition_data[0].records, memoryview)


# -- decode_produce_request: the request built from the frame, no kafka-python decode ---------------


def _kafka_python_fields(body) -> tuple:
    return (
        body.transactional_id,
        body.acks,
        body.timeout_ms,
        [
            (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in body.topic_data
        ],
    )


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("transactional_id", [None, "txn-1", "ünïcode"])
def test_decode_produce_request_equals_kafka_pythons_decode_with_records_as_views(version, transactional_id):
    frame = _frame(_request(transactional_id), version)
    header, reference = decode_request(bytes(frame), ProduceRequest, version)  # bytes: kafka-python
    body = decode_produce_request(frame, header.body_offset, version)
    assert body is not None and body._version == version
    assert _kafka_python_fields(body) == _kafka_python_fields(reference)
    records = [p.records for t in body.topic_data for p in t.partition_data]
    assert all(isinstance(r, memoryview) and not r.readonly for r in records)
    records[-1][0:4] = b"WXYZ"
    assert b"WXYZ" in frame
    # decode_request takes this path for big frames.
    assert len(frame) >= RECORD_VIEWS_MIN_BYTES
    _header, via_apis = decode_request(frame, ProduceRequest, version)
    assert _kafka_python_fields(via_apis)[:3] == _kafka_python_fields(reference)[:3]


def _v3_body(name: bytes | None, *, topics: int = 1) -> bytearray:
    """A v3 Produce body by hand: null transactional id, acks 1, timeout 1000, ``topics`` (-1: null)
    topics named ``name`` (None: a null string), each with no partitions."""
    body = bytearray(struct.pack(">hhii", -1, 1, 1000, topics))
    for _ in range(max(topics, 0)):
        body += struct.pack(">h", -1) if name is None else struct.pack(">h", len(name)) + name
        body += struct.pack(">i", 0)
    return body


def test_decode_produce_request_declines_what_kafka_python_must_judge():
    version = 9
    frame = _frame(_request(None), version)
    header, _ = decode_request(bytes(frame), ProduceRequest, version)
    start = header.body_offset
    assert frame[-1] == 0  # the request's own (empty) tagged-field section
    tagged = frame[:-1] + bytearray([1, 0, 1]) + b"x"  # one unknown tag: kafka-python keeps it
    assert decode_produce_request(tagged, start, version) is None
    assert decode_produce_request(frame + b"\x00", start, version) is None  # bytes after the body
    assert decode_produce_request(frame[:-1000], start, version) is None  # truncated
    assert decode_produce_request(bytes(frame), start, version) is None  # not writable
    assert decode_produce_request(frame, start, 13) is None  # v13 names topics by id
    assert decode_produce_request(_v3_body(b"ok"), 0, 3) is not None
    assert decode_produce_request(_v3_body(None), 0, 3) is None  # a null topic name
    assert decode_produce_request(_v3_body(b"\xff\xfe"), 0, 3) is None  # not UTF-8
    assert decode_produce_request(_v3_body(b"ok", topics=-1), 0, 3) is None  # a null topic array


def test_a_big_frame_with_a_tagged_field_still_decodes_through_kafka_python_with_views():
    version = 9
    frame = _frame(_request(None), version)
    tagged = frame[:-1] + bytearray([1, 0, 1]) + b"x"
    _header, body = decode_request(tagged, ProduceRequest, version)
    records = body.topic_data[2].partition_data[0].records
    assert isinstance(records, memoryview) and bytes(records) == bytes(range(256)) * 1100
