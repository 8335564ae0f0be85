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
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter

PRODUCE_API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 12
_FIRST_FLEXIBLE = 9

_REQUEST_HEADER = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


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

    def encode(self, correlation_id: int, client_id: str | None) -> bytearray:
        """The whole frame: size prefix, request header, body."""
        flexible = self.version >= _FIRST_FLEXIBLE
        by_topic: dict[str, list[tuple[int, bytes | bytearray]]] = {}
        for topic, partition, records in self.batches:
            entries = by_topic.get(topic)
            if entries is None:
                entries = by_topic[topic] = []
            entries.append((partition, records))
        writer = SchemaWriter(flexible=False)  # the header's client id is a classic string in v2 too
        writer.out += _REQUEST_HEADER.pack(0, PRODUCE_API_KEY, self.version, correlation_id)
        writer.string(client_id)
        if flexible:
            writer.uvarint(0)  # header tagged fields
            writer.flexible = True
        writer.string(self.transactional_id)
        writer.out += _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms)
        writer.array_len(len(by_topic))
        for topic, entries in by_topic.items():
            writer.string(topic)
            writer.array_len(len(entries))
            for partition, records in entries:
                writer.int32(partition)
                writer.bytes_(records)
                if flexible:
                    writer.uvarint(0)
            if flexible:
                writer.uvarint(0)
        if flexible:
            writer.uvarint(0)
        frame = writer.out
        _INT32.pack_into(frame, 0, len(frame) - 4)
        return frame

    def decode_response(self, frame: bytes | memoryview) -> list[PartitionResult]:
        """Read the response ``frame`` (from the correlation id on) into one result per partition."""
        try:
            return _decode_response(memoryview(frame), self.version)
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
            raise KafkaError(
                f"unreadable ProduceResponse v{self.version}: {exc!r}", ErrorCode.CORRUPT_MESSAGE
            )


def _decode_response(data: memoryview, version: int) -> list[PartitionResult]:
    reader = SchemaReader(data, "ProduceResponse", flexible=version >= _FIRST_FLEXIBLE)
    reader.int32()  # correlation id: the connection has matched it already
    reader.tagged_fields()  # response header v1 (flexible versions)
    results: list[PartitionResult] = []
    for _ in range(reader.array_len()):
        topic = reader.string()
        for _ in range(reader.array_len()):
            index, error_code = reader.int32(), reader.int16()
            base_offset, append_time = reader.int64(), reader.int64()
            if version >= 5:
                reader.int64()  # log start offset
            message = None
            if version >= 8:
                for _ in range(reader.array_len()):  # record errors: the sender uses the message
                    reader.int32()
                    reader.nullable_string()
                    reader.tagged_fields()
                message = reader.nullable_string()
            reader.tagged_fields()  # v10+: current leader (tag 0)
            results.append(PartitionResult(topic, index, error_code, base_offset, append_time, message))
        reader.tagged_fields()
    return results  # throttle time and (v10+) node endpoints follow; the sender uses neither
