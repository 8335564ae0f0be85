"""ProduceResponse (v3-v12) encoded by hand, byte for byte what kafka-python writes.

Every Produce request is answered, so its answer's encoding is paid as often as the request's
decoding: kafka-python's generic encoder took ~20 us a response here (more with cold caches), this
~5 us. Only the shape the broker's Produce handler builds is handled: no per-batch record errors, no
tagged fields (KIP-951's current leader and node endpoints). Anything else returns None and the
caller uses kafka-python, so the two can never disagree on what goes on the wire (the tests compare
the bytes at every version).

Layout (Kafka's ProduceResponse.json; "compact" lengths and tagged-field sections from v9)::

    responses [ name string | partition_responses [ index int32 | error_code int16 |
        base_offset int64 | log_append_time_ms int64 | log_start_offset int64 (v5+) |
        record_errors [..] (v8+) | error_message nullable string (v8+) | tags ] | tags ]
    throttle_time_ms int32 | tags
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.producer import ProduceResponse

from onceflow.protocol.schema_io import SchemaWriter

FIRST_VERSION = 3
LAST_VERSION = 12  # v13 names topics by id
_FIRST_LOG_START_OFFSET_VERSION = 5
_FIRST_ERROR_FIELDS_VERSION = 8
_FIRST_FLEXIBLE_VERSION = 9

_SIZE_AND_CORRELATION_ID = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... then log_start_offset


def encode_produce_response(response: Any, correlation_id: int, version: int) -> bytearray | None:
    """The framed bytes (size prefix, header, body) of ``response``, or None if it is not the plain
    shape this encoder knows (see the module doc)."""
    if not FIRST_VERSION <= version <= LAST_VERSION or type(response) is not ProduceResponse:
        return None
    if response.tags:
        return None
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    with_log_start = version >= _FIRST_LOG_START_OFFSET_VERSION
    with_errors = version >= _FIRST_ERROR_FIELDS_VERSION
    writer = SchemaWriter(flexible)
    out = writer.out
    out += bytes(8)  # size and correlation id, filled in last
    if flexible:
        out.append(0)  # response header v1: an empty tagged-field section
    topics = response.responses
    writer.array_len(len(topics))
    for topic in topics:
        if topic.tags:
            return None
        writer.string(topic.name)
        partitions = topic.partition_responses
        writer.array_len(len(partitions))
        for p in partitions:
            if p.tags or p.record_errors:
                return None
            if with_log_start:
                out += _PARTITION_V5.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                )
            else:
                out += _PARTITION_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if with_errors:
                writer.array_len(0)  # record_errors
                writer.string(p.error_message)
            if flexible:
                out.append(0)  # no tagged fields
        if flexible:
            out.append(0)
    out += _INT32.pack(response.throttle_time_ms)
    if flexible:
        out.append(0)
    _SIZE_AND_CORRELATION_ID.pack_into(out, 0, len(out) - 4, correlation_id)
    return out
