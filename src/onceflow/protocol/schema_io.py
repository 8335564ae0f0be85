"""Bounds-checked reading and writing of Kafka's message-schema primitives.

Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``) store keys and values in
the same generated-schema encoding as the wire protocol: big-endian ints, int16-length strings,
int32-length bytes and arrays, and in "flexible" versions compact (uvarint length + 1) strings,
bytes and arrays followed by tagged fields. Both record formats share this one reader and writer;
``what`` names the record kind so that errors say which topic's bytes were bad.
"""

from __future__ import annotations

import struct
import uuid

from onceflow.protocol.errors import CorruptMessage

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class SchemaReader:
    """Reads schema fields from ``buf``; any overrun or malformed field is a :class:`CorruptMessage`.

    ``flexible`` selects the compact encodings of strings, bytes and arrays and enables tagged fields;
    a caller sets it once it has read the version prefix.
    """

    __slots__ = ("buf", "pos", "what", "flexible")

    def __init__(self, buf: bytes, what: str, flexible: bool = False) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptMessage(f"{self.what} record truncated at byte {self.pos} (wanted {n} more)")
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def int8(self) -> int:
        return _INT8.unpack(self._take(1))[0]

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            # Kafka's readUnsignedVarint accepts at most five bytes (a 32-bit value).
            if shift > 28:
                raise CorruptMessage(f"{self.what} record has an over-long varint")

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def nullable_string(self) -> str | None:
        length = self.uvarint() - 1 if self.flexible else self.int16()
        if length < 0:
            return None
        try:
            return bytes(self._take(length)).decode()
        except UnicodeDecodeError as exc:
            raise CorruptMessage(f"{self.what} record has a non-UTF-8 string: {exc}") from exc

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise CorruptMessage(f"{self.what} record has a null string where one is required")
        return text

    def bytes_(self) -> bytes:
        """A bytes field; null reads as empty."""
        length = self.uvarint() - 1 if self.flexible else self.int32()
        return b"" if length < 0 else bytes(self._take(length))

    def array_len(self) -> int:
        """An array's element count; null reads as empty."""
        count = self.uvarint() - 1 if self.flexible else self.int32()
        return max(count, 0)

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields of a flexible struct by tag (empty for a non-flexible one)."""
        fields: dict[int, bytes] = {}
        if not self.flexible:
            return fields
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = bytes(self._take(self.uvarint()))
        return fields


class SchemaWriter:
    """Appends schema fields; :meth:`done` returns the bytes. ``flexible`` as for the reader."""

    __slots__ = ("out", "flexible")

    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def int8(self, v: int) -> None:
        self.out += _INT8.pack(v)

    def int16(self, v: int) -> None:
        self.out += _INT16.pack(v)

    def int32(self, v: int) -> None:
        self.out += _INT32.pack(v)

    def int64(self, v: int) -> None:
        self.out += _INT64.pack(v)

    def uvarint(self, n: int) -> None:
        while n >= 0x80:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def string(self, v: str | None) -> None:
        if v is None:
            self._length(-1, classic=self.int16)
            return
        raw = v.encode()
        self._length(len(raw), classic=self.int16)
        self.out += raw

    def bytes_(self, v: bytes) -> None:
        self._length(len(v), classic=self.int32)
        self.out += v

    def array_len(self, count: int | None) -> None:
        """An array's length prefix; None writes a null array."""
        self._length(-1 if count is None else count, classic=self.int32)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """Tagged fields in ascending tag order (a flexible struct's trailer)."""
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data

    def _length(self, n: int, classic) -> None:
        # compact encodings store length + 1, so null (-1) is 0
        if self.flexible:
            self.uvarint(n + 1)
        else:
            classic(n)

    def done(self) -> bytes:
        return bytes(self.out)
