"""Produce requests and responses on the wire, built and read by hand (versions 3-12).

The producer sends one Produce request per ready batch set, i.e. thousands per second with Kafka's
default batch.size of 16 KiB; kafka-python's generic message classes cost ~75 us to encode such a
request and ~20 us to decode its answer, more than the rest of the producer's per-request work. The
layout is small and fixed, so we write it directly (the records are already encoded batches) and read
only the fields the sender uses. Golden tests check both against kafka-python for every version.

Request header v1 (v3-8) / v2 (v9+, flexible: compact strings and arrays, tagged fields); response
header v0 / v1. Produce v13 names topics by id; the client stops at 12 (``CLIENT_MAX_VERSIONS``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from onceflow.protocol.errors import ErrorCode, KafkaError

PRODUCE_API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 12
_FIRST_FLEXIBLE = 9

_REQUEST_HEADER = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">i")
_PARTITION_FIXED = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_EMPTY_TAGS = b"\x00"


class PartitionResult(NamedTuple):
    """One partition's answer: what the sender needs from a Produce response."""

    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    error_message: str | None


class ProduceRequestFrame:
    """A Produce request of already encoded record batches, written straight to bytes.

    ``batches`` is ``[(topic, partition, records)]`` with at most one entry per partition (the broker
    takes one magic-2 batch per partition and request); entries of a topic are grouped in first-seen
    order. Used with :meth:`onceflow.client.connection.Connection.send_frame`.
    """

    name = "ProduceRequest"
    api_key = PRODUCE_API_KEY

    __slots__ = ("version", "transactional_id", "acks", "timeout_ms", "batches")

    def __init__(
        self,
        version: int,
        transactional_id: str | None,
        acks: int,
        timeout_ms: int,
        batches: list[tuple[str, int, bytes | bytearray]],
    ) -> None:
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"Produce v{version} is not written by hand (v{MIN_VERSION}-{MAX_VERSION})")
        self.version = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.batches = batches

    def expect_response(self) -> bool:
        return self.acks != 0  # acks=0: the broker answers nothing

    def encode(self, correlation_id: int, client_id: str | None) -> bytes:
        """The whole frame: size prefix, request header, body."""
        flexible = self.version >= _FIRST_FLEXIBLE
        by_topic: dict[str, list[tuple[int, bytes | bytearray]]] = {}
        for topic, partition, records in self.batches:
            entries = by_topic.get(topic)
            if entries is None:
                entries = by_topic[topic] = []
            entries.append((partition, records))
        parts: list[bytes | bytearray] = [b"", _nullable_string(client_id)]  # [0]: header, set below
        if flexible:
            parts.append(_EMPTY_TAGS)
            parts.append(_compact_nullable_string(self.transactional_id))
        else:
            parts.append(_nullable_string(self.transactional_id))
        parts.append(_ACKS_TIMEOUT.pack(self.acks, self.timeout_ms))
        parts.append(_uvarint(len(by_topic) + 1) if flexible else _INT32.pack(len(by_topic)))
        for topic, entries in by_topic.items():
            name = topic.encode()
            if flexible:
                parts.append(_uvarint(len(name) + 1) + name + _uvarint(len(entries) + 1))
            else:
                parts.append(_INT16.pack(len(name)) + name + _INT32.pack(len(entries)))
            for partition, records in entries:
                if flexible:
                    parts.append(_PARTITION_HEAD.pack(partition) + _uvarint(len(records) + 1))
                    parts.append(records)
                    parts.append(_EMPTY_TAGS)
                else:
                    parts.append(_PARTITION_HEAD.pack(partition) + _INT32.pack(len(records)))
                    parts.append(records)
            if flexible:
                parts.append(_EMPTY_TAGS)
        if flexible:
            parts.append(_EMPTY_TAGS)
        size = _REQUEST_HEADER.size - 4 + sum(len(p) for p in parts)
        parts[0] = _REQUEST_HEADER.pack(size, PRODUCE_API_KEY, self.version, correlation_id)
        return b"".join(parts)

    def decode_response(self, frame: bytes | memoryview) -> list[PartitionResult]:
        """Read the response ``frame`` (from the correlation id on) into one result per partition."""
        try:
            return _decode_response(memoryview(frame), self.version)
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
            raise KafkaError(
                f"unreadable ProduceResponse v{self.version}: {exc!r}", ErrorCode.CORRUPT_MESSAGE
            )


def _decode_response(data: memoryview, version: int) -> list[PartitionResult]:
    flexible = version >= _FIRST_FLEXIBLE
    pos = 4  # correlation id: the connection has matched it already
    if flexible:
        pos = _skip_tags(data, pos)
    if flexible:
        topics, pos = _uvarint_at(data, pos)
        topics -= 1
    else:
        (topics,) = _INT32.unpack_from(data, pos)
        pos += 4
    results: list[PartitionResult] = []
    for _ in range(max(topics, 0)):
        if flexible:
            length, pos = _uvarint_at(data, pos)
            length -= 1
        else:
            (length,) = _INT16.unpack_from(data, pos)
            pos += 2
        topic = str(data[pos : pos + length], "utf-8")
        pos += length
        if flexible:
            partitions, pos = _uvarint_at(data, pos)
            partitions -= 1
        else:
            (partitions,) = _INT32.unpack_from(data, pos)
            pos += 4
        for _ in range(max(partitions, 0)):
            index, error_code, base_offset, append_time = _PARTITION_FIXED.unpack_from(data, pos)
            pos += _PARTITION_FIXED.size
            if version >= 5:
                pos += 8  # log start offset
            message = None
            if version >= 8:
                pos = _skip_record_errors(data, pos, flexible)
                message, pos = _read_nullable_string(data, pos, flexible)
            if flexible:
                pos = _skip_tags(data, pos)  # v10+: current leader (tag 0)
            results.append(PartitionResult(topic, index, error_code, base_offset, append_time, message))
        if flexible:
            pos = _skip_tags(data, pos)
    return results  # throttle time and (v10+) node endpoints follow; the sender uses neither


def _skip_record_errors(data: memoryview, pos: int, flexible: bool) -> int:
    if flexible:
        count, pos = _uvarint_at(data, pos)
        count -= 1
    else:
        (count,) = _INT32.unpack_from(data, pos)
        pos += 4
    for _ in range(max(count, 0)):
        pos += 4  # batch index
        _message, pos = _read_nullable_string(data, pos, flexible)
        if flexible:
            pos = _skip_tags(data, pos)
    return pos


def _read_nullable_string(data: memoryview, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        length, pos = _uvarint_at(data, pos)
        length -= 1
    else:
        (length,) = _INT16.unpack_from(data, pos)
        pos += 2
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(data):
        raise ValueError("string runs past the end of the response")
    return str(data[pos:end], "utf-8"), end


def _skip_tags(data: memoryview, pos: int) -> int:
    count, pos = _uvarint_at(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint_at(data, pos)
        size, pos = _uvarint_at(data, pos)
        pos += size
    if pos > len(data):
        raise ValueError("tagged fields run past the end of the response")
    return pos


def _uvarint_at(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("unsigned varint longer than 5 bytes")


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    return _INT16.pack(len(raw)) + raw


def _compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return _uvarint(len(raw) + 1) + raw
