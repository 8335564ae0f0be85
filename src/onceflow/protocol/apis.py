"""Request/response classes by API key (from kafka-python's ``kafka.protocol``) and framing helpers.

A Kafka request on the wire is ``int32 size`` then the request header then the body:

- header v1: ``api_key int16, api_version int16, correlation_id int32, client_id nullable string``;
- header v2 (flexible API versions): the same plus tagged fields. ``client_id`` stays a classic
  (non-compact) string even in v2, for the sake of brokers that must read it before knowing the API.

Responses carry ``correlation_id`` (header v0) plus tagged fields when the API version is flexible
(header v1), except ApiVersions, whose response header is always v0 so that a client that does not
yet know what the broker speaks can read it. kafka-python's ``ApiVersionsResponse`` encodes that.

Nothing here touches sockets; the broker's ``connection`` module frames bytes with these helpers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin as _admin
import kafka.protocol.consumer as _consumer
import kafka.protocol.metadata as _metadata
import kafka.protocol.producer as _producer
import kafka.protocol.sasl as _sasl
from kafka.protocol.api_message import ApiMessage

from onceflow.protocol import messages as _ours
from onceflow.protocol.errors import ErrorCode, InvalidRequest
from onceflow.protocol.produce_records import attach_record_views, decode_produce_request
from onceflow.protocol.produce_response import encode_produce_response

_HEADER_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
PRODUCE_KEY = 0
# Below this a Produce frame's records are cheaper to copy (~5 us per 100 KB) than to locate (~13 us).
RECORD_VIEWS_MIN_BYTES = 256 * 1024


def _message_classes(kind: str) -> dict[int, type[ApiMessage]]:
    table: dict[int, type[ApiMessage]] = {}
    for module in (_admin, _consumer, _metadata, _producer, _sasl, _ours):
        for name in getattr(module, "__all__", dir(module)):
            obj = getattr(module, name)
            is_message = isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage
            if is_message and obj.type == kind:
                table[obj.API_KEY] = obj
    return table


REQUEST_CLASSES: dict[int, type[ApiMessage]] = _message_classes("request")
RESPONSE_CLASSES: dict[int, type[ApiMessage]] = _message_classes("response")
PRODUCE_RESPONSE = RESPONSE_CLASSES[PRODUCE_KEY]


def request_class(api_key: int) -> type[ApiMessage] | None:
    return REQUEST_CLASSES.get(api_key)


def response_class(api_key: int) -> type[ApiMessage]:
    return RESPONSE_CLASSES[api_key]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts in the frame


def peek_request_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the fixed prefix every request header version shares."""
    if len(frame) < _HEADER_PREFIX.size:
        raise InvalidRequest(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame, 0)


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidRequest("truncated varint in request header")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise InvalidRequest("varint in request header is too long")


def decode_request_header(frame: bytes | bytearray | memoryview, *, flexible: bool) -> RequestHeader:
    """Parse the request header (v1, or v2 when ``flexible``); raises ``InvalidRequest`` if unreadable."""
    buf = memoryview(frame)
    api_key, api_version, correlation_id = peek_request_header(buf)
    pos = _HEADER_PREFIX.size
    if pos + 2 > len(buf):
        raise InvalidRequest("truncated client_id in request header")
    (length,) = _INT16.unpack_from(buf, pos)
    pos += 2
    client_id = None
    if length >= 0:
        if pos + length > len(buf):
            raise InvalidRequest("truncated client_id in request header")
        try:
            client_id = bytes(buf[pos : pos + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("client_id is not UTF-8")
        pos += length
    elif length != -1:
        raise InvalidRequest(f"client_id length {length} is invalid")
    if flexible:
        count, pos = _read_uvarint(buf, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(buf, pos)
            size, pos = _read_uvarint(buf, pos)
            pos += size
            if pos > len(buf):
                raise InvalidRequest("truncated tagged field in request header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def decode_request(
    frame: bytes | bytearray | memoryview, request_cls: type[ApiMessage], api_version: int
) -> tuple[RequestHeader, ApiMessage]:
    """Header and body of one request frame (without the size prefix).

    kafka-python reports a truncated body as ``struct.error``/``IndexError`` and bad strings as
    ``UnicodeDecodeError``; all of them become ``InvalidRequest`` here so callers see one error type.
    """
    header = decode_request_header(frame, flexible=request_cls.flexible_version_q(api_version))
    big_produce = (
        header.api_key == PRODUCE_KEY
        and isinstance(frame, bytearray)
        and len(frame) >= RECORD_VIEWS_MIN_BYTES
    )
    if big_produce:
        # Built straight from the frame, records as views: no copy of the produced bytes. Anything
        # unusual returns None and takes kafka-python's path below.
        produce = decode_produce_request(frame, header.body_offset, api_version)
        if produce is not None:
            return header, produce
    try:
        body = request_cls.decode(memoryview(frame)[header.body_offset :], version=api_version)
    except Exception as exc:  # any decode failure means the frame is unreadable
        raise InvalidRequest(f"cannot decode {request_cls.__name__} v{api_version}: {exc!r}")
    _reject_null_where_not_nullable(body, request_cls._struct, api_version, request_cls.__name__)
    if big_produce:
        # The records as writable views of the frame, not kafka-python's copies (see produce_records).
        attach_record_views(body, frame, header.body_offset, api_version)
    return header, body


# Types whose null (-1 / 0 length prefix) kafka-python decodes as None whatever the schema says.
_NULLABLE_KINDS = ("string", "bytes", "records")


def _reject_null_where_not_nullable(obj, struct_field, version: int, path: str) -> None:
    """Kafka's parser refuses a null in a field the schema does not declare nullable at this version,
    and a null element in an array of strings or bytes (elements are never nullable); kafka-python
    accepts both and hands handlers a ``None`` where they expect a list or a string. Doing the check
    once here keeps every handler free of such guards (the fuzz test found them)."""
    _check_nulls(obj, _null_check_plan(struct_field, version), version, path)


# One step of a null-check plan: (field name, null forbidden, "array" | "struct" | "items" | None,
# nested plan); "items": an array of strings or bytes, none of whose elements may be null.
_PlanStep = tuple[str, bool, str | None, tuple]


# By (id(schema field), version); the field is kept in the value so its id stays its own.
_PLANS: dict[tuple[int, int], tuple[object, tuple[_PlanStep, ...]]] = {}


def _null_check_plan(struct_field, version: int) -> tuple[_PlanStep, ...]:
    """The fields of ``struct_field`` at ``version`` that need a look: computed once per message
    version rather than walking the schema on every request (it showed in the per-request profile).
    Keyed by identity: kafka-python's schema fields compare by value and are unhashable."""
    cached = _PLANS.get((id(struct_field), version))
    if cached is not None:
        return cached[1]
    plan = []
    for field in struct_field._fields:
        if field.tag is not None or not field.for_version_q(version):
            continue
        forbid_null = (
            field.is_array() or field.is_struct() or field.type_str in _NULLABLE_KINDS
        ) and not field.nullable_for_version_q(version)
        kind = "array" if field.is_struct_array() else "struct" if field.is_struct() else None
        nested = _null_check_plan(field, version) if kind is not None else ()
        if field.is_array() and kind is None and field.array_of.type_str in _NULLABLE_KINDS:
            kind = "items"
        if forbid_null or nested or kind == "items":
            plan.append((field.name, forbid_null, kind, nested))
    _PLANS[(id(struct_field), version)] = (struct_field, tuple(plan))
    return tuple(plan)


def _check_nulls(obj, plan: tuple[_PlanStep, ...], version: int, path: str) -> None:
    for name, forbid_null, kind, nested in plan:
        value = getattr(obj, name, None)
        if value is None:
            if forbid_null:
                raise InvalidRequest(f"{path}.{name} is null but not nullable in v{version}")
        elif kind == "items":
            if None in value:
                raise InvalidRequest(f"{path}.{name} has a null element (never nullable) in v{version}")
        elif nested:
            if kind == "array":
                for item in value:
                    _check_nulls(item, nested, version, f"{path}.{name}")
            else:
                _check_nulls(value, nested, version, f"{path}.{name}")


class _ResponseHeader:
    """Stands in for kafka-python's ``ResponseHeader`` when encoding: the same bytes (correlation id,
    plus an empty tagged-field section when the header is flexible) without building a header object
    and running the generic struct encoder, about half of encoding a small response. kafka-python asks
    it for ``encode(flexible=...)``; ApiVersionsResponse asks with ``flexible=False`` whatever its
    version, so that rule stays kafka-python's."""

    __slots__ = ("correlation_id", "request_api_version")

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id
        self.request_api_version = None

    def encode(self, flexible: bool = False) -> bytes:
        encoded = _INT32.pack(self.correlation_id)
        return encoded + b"\x00" if flexible else encoded


# Small responses whose values repeat request after request (an EndTxn v0-4 answer is NONE, -1, -1
# at every commit; a producer's AddPartitionsToTxn answers NONE for the same partition each
# transaction; Heartbeat and AddOffsetsToTxn mostly NONE): their body is encoded once per distinct
# (version, values) and reused; only the header is written per response. Each class has a function
# giving the values that decide its body (None: not reused).


def _flat_values(fields: tuple[str, ...]) -> Callable[[Any, int], tuple | None]:
    def values(response: Any, _version: int) -> tuple:
        return tuple([getattr(response, name) for name in fields])

    return values


def _add_partitions_values(response: Any, version: int) -> tuple | None:
    if version >= 4:
        return None  # the batched (broker-to-broker) form: varied, left to kafka-python each time
    return (
        response.throttle_time_ms,
        *[
            (topic.name, *[(p.partition_index, p.partition_error_code) for p in topic.results_by_partition])
            for topic in response.results_by_topic_v3_and_below
        ],
    )


_REUSED_BODY_VALUES: dict[type, Callable[[Any, int], tuple | None]] = {
    **{
        RESPONSE_CLASSES[key]: _flat_values(tuple(RESPONSE_CLASSES[key]._struct.fields))
        for key in (12, 25, 26)  # Heartbeat, AddOffsetsToTxn, EndTxn: a few scalars
    },
    RESPONSE_CLASSES[24]: _add_partitions_values,
}
_REUSED_BODIES_MAX = 1024  # distinct bodies kept (then the table starts afresh)
_reused_bodies: dict[tuple, bytes] = {}
_SIZE_AND_CORRELATION_ID = struct.Struct(">ii")


def encode_response(response: ApiMessage, correlation_id: int, api_version: int) -> bytearray:
    """The framed bytes (size prefix, header, body) of ``response`` at ``api_version``."""
    if type(response) is PRODUCE_RESPONSE:
        framed = encode_produce_response(response, correlation_id, api_version)
        if framed is not None:
            return framed
    values_of = _REUSED_BODY_VALUES.get(type(response))
    if values_of is not None:
        values = values_of(response, api_version)
        if values is not None:
            return _encode_with_reused_body(response, values, correlation_id, api_version)
    # kafka-python quirks: the version must be set before the header (setting it updates the header),
    # and encode wants both; drop any header the response already had.
    response._header = None
    response.API_VERSION = api_version
    response._header = _ResponseHeader(correlation_id)
    return response.encode(header=True, framed=True)


def _encode_with_reused_body(
    response: ApiMessage, values: tuple, correlation_id: int, api_version: int
) -> bytearray:
    key = (type(response), api_version, values)
    body = _reused_bodies.get(key)
    if body is None:
        response._header = None
        body = bytes(response.encode(version=api_version))
        if len(_reused_bodies) >= _REUSED_BODIES_MAX:
            _reused_bodies.clear()
        _reused_bodies[key] = body
    flexible = response.flexible_version_q(api_version)
    header_size = 5 if flexible else 4  # correlation id, then an empty tagged-field section if flexible
    out = bytearray(_SIZE_AND_CORRELATION_ID.pack(header_size + len(body), correlation_id))
    if flexible:
        out.append(0)
    out += body
    return out


def unsupported_api_versions_response(correlation_id: int, min_version: int, max_version: int) -> bytearray:
    """Kafka's answer to an ApiVersions request at a version it does not know: a v0 body with
    UNSUPPORTED_VERSION and the ApiVersions range, so that the client retries at a version we speak."""
    cls = RESPONSE_CLASSES[18]
    response = cls(
        error_code=int(ErrorCode.UNSUPPORTED_VERSION),
        api_keys=[cls.ApiVersion(api_key=18, min_version=min_version, max_version=max_version)],
        version=0,
    )
    return encode_response(response, correlation_id, 0)
