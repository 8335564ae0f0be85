"""Where each partition's records sit inside a Produce request frame (v3-v12), so the broker can hand
the log a view of the request's own bytes instead of a copy.

kafka-python decodes the request (it stays the one parser that validates it) and copies each
``records`` field into a new ``bytes``; the log needs a writable buffer (it patches ``baseOffset`` in
place), so without this the broker copied every produced byte once more. ``attach_record_views``
walks the same wire layout, only to find offsets, and replaces each decoded ``records`` with a
writable ``memoryview`` of the frame. It changes nothing unless every partition it finds matches the
decoded request (same partition index, same length, in the same order); any surprise leaves the
decoded copies in place. Pure: no I/O.

``decode_produce_request`` goes one step further for v3-v12: it builds the request from that same
walk, so the records are never copied at all (kafka-python's decode copies each one first: ~70 us per
MB here, the largest part of decoding a big Produce). It accepts only what kafka-python would decode
to the same values (no tagged fields, no nulls where the schema forbids them, valid UTF-8, nothing
after the last field) and returns None for anything else, so the caller falls back to kafka-python,
which remains the parser that rejects bad frames.

Layout (Kafka's ProduceRequest.json; "compact" forms from v9, the first flexible version)::

    transactional_id nullable string | acks int16 | timeout_ms int32
    topic_data [ name string | partition_data [ index int32 | records nullable bytes | tags ] | tags ]
    tags
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.producer import ProduceRequest

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
FIRST_FLEXIBLE_VERSION = 9
MAX_WALKED_VERSION = 12  # v13 names topics by id


class _Mismatch(Exception):
    """The frame is not laid out as expected: keep kafka-python's copies."""


class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise _Mismatch
        self.pos = start + n
        return start

    def int16(self) -> int:
        return _INT16.unpack_from(self.buf, self.take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack_from(self.buf, self.take(4))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.take(1)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise _Mismatch

    def length(self, *, wide: bool) -> int:
        """A string/bytes/array length prefix; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def skip_string(self) -> None:
        n = self.length(wide=False)
        if n > 0:
            self.take(n)

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())

    def no_tags(self) -> None:
        """A tagged-field section that must be empty (ProduceRequest defines no tagged fields)."""
        if self.flexible and self.uvarint() != 0:
            raise _Mismatch

    def string(self) -> str | None:
        n = self.length(wide=False)
        if n < 0:
            return None
        start = self.take(n)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError:
            raise _Mismatch from None


def _record_spans(frame: memoryview, body_offset: int, version: int) -> list[list[tuple[int, int, int]]]:
    """Per topic, per partition: ``(index, start, length)`` of the records field (length -1: null)."""
    reader = _Reader(frame, body_offset, version >= FIRST_FLEXIBLE_VERSION)
    reader.skip_string()  # transactional_id
    reader.take(6)  # acks, timeout_ms
    topics = []
    for _ in range(max(reader.length(wide=True), 0)):
        reader.skip_string()  # name
        partitions = []
        for _ in range(max(reader.length(wide=True), 0)):
            index = reader.int32()
            size = reader.length(wide=True)
            start = reader.take(size) if size >= 0 else -1
            partitions.append((index, start, size))
            reader.skip_tags()
        reader.skip_tags()
        topics.append(partitions)
    return topics


def attach_record_views(request: Any, frame: bytearray, body_offset: int, version: int) -> bool:
    """Point each partition's ``records`` of a decoded ProduceRequest at its bytes inside ``frame``
    (writable views). True if done; False (request untouched) if the frame did not match."""
    if not 3 <= version <= MAX_WALKED_VERSION or not isinstance(frame, bytearray):
        return False
    view = memoryview(frame)
    try:
        spans = _record_spans(view, body_offset, version)
    except (_Mismatch, struct.error, IndexError):
        return False
    topic_data = request.topic_data or []
    if len(spans) != len(topic_data):
        return False
    views = []
    for found, topic in zip(spans, topic_data, strict=True):
        partitions = topic.partition_data or []
        if len(found) != len(partitions):
            return False
        for (index, start, size), data in zip(found, partitions, strict=True):
            records = data.records
            if index != data.index or (records is None) != (size < 0):
                return False
            if records is not None and len(records) != size:
                return False
            views.append((data, view[start : start + size] if size >= 0 else None))
    for data, records_view in views:
        data.records = records_view
    return True


_TopicData = ProduceRequest.TopicProduceData
_PartitionData = _TopicData.PartitionProduceData


def decode_produce_request(frame: bytearray, body_offset: int, version: int) -> ProduceRequest | None:
    """The ProduceRequest (v3-v12) in ``frame[body_offset:]``, its ``records`` writable views of
    ``frame``; None if the body is anything but a plain, well-formed request (see the module doc)."""
    if not 3 <= version <= MAX_WALKED_VERSION or not isinstance(frame, bytearray):
        return None
    view = memoryview(frame)
    reader = _Reader(view, body_offset, version >= FIRST_FLEXIBLE_VERSION)
    try:
        transactional_id = reader.string()
        acks = reader.int16()
        timeout_ms = reader.int32()
        topic_count = reader.length(wide=True)
        if topic_count < 0:
            return None
        topic_data = []
        for _ in range(topic_count):
            name = reader.string()
            partition_count = reader.length(wide=True)
            if name is None or partition_count < 0:
                return None
            partitions = []
            for _ in range(partition_count):
                index = reader.int32()
                size = reader.length(wide=True)
                records = view[reader.take(size) : reader.pos] if size >= 0 else None
                reader.no_tags()
                partitions.append(_PartitionData(index=index, records=records))
            reader.no_tags()
            topic_data.append(_TopicData(name=name, partition_data=partitions))
        reader.no_tags()
    except (_Mismatch, struct.error, IndexError):
        return None
    if reader.pos != len(view):
        return None
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=topic_data,
        version=version,
    )
