"""Records of the ``__transaction_state`` topic, in Kafka's byte format.

Kafka stores one record per transactional id and state change: the key is ``TransactionLogKey``
(version 0: the transactional id) and the value is ``TransactionLogValue`` (versions 0 and 1; version 1
is "flexible": compact strings and arrays plus tagged fields). Both are prefixed by an int16 version,
as Kafka's ``MessageUtil.toVersionPrefixedBytes`` writes them. A null value is a tombstone: the
transactional id expired and compaction may drop it.

We write value version 1 so that the KIP-890 fields (previous/next producer id and the client's
transaction version) survive a reload; we read both versions. Status numbers are Kafka's
(``TransactionState.id``), so a dump of our topic reads like Kafka's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from onceflow.protocol.errors import CorruptMessage

KEY_VERSION = 0
VALUE_VERSION = 1  # the version we write; we read 0 and 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One persisted state of a transactional id (Kafka's ``TransactionLogValue`` fields)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int  # TransactionState.id
    transaction_partitions: frozenset[TopicPartition]
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # tagged field 0 (v1+)
    next_producer_id: int = NO_PRODUCER_ID  # tagged field 1 (v1+)
    client_transaction_version: int = 0  # tagged field 2 (v1+)


# Status 0 is Empty: Kafka writes a null partition array for it and ignores any on read.
_EMPTY_STATUS = 0


# -- key ---------------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(raw)) + raw


def decode_key(buf: bytes) -> str:
    """The transactional id of a key; raises :class:`CorruptMessage` for unknown versions or bad bytes."""
    reader = _Reader(buf)
    version = reader.int16()
    if version != KEY_VERSION:
        raise CorruptMessage(f"__transaction_state key has unknown version {version}")
    return reader.string(flexible=False)


# -- value -------------------------------------------------------------------------------------------


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} is not supported (0 or 1)")
    flexible = version >= 1
    out = bytearray(struct.pack(">h", version))
    out += struct.pack(
        ">qhib",
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        value.transaction_status,
    )
    _write_partitions(out, value, flexible)
    out += struct.pack(
        ">qq", value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms
    )
    if flexible:
        tagged: list[tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tagged.append((0, struct.pack(">q", value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tagged.append((1, struct.pack(">q", value.next_producer_id)))
        if value.client_transaction_version != 0:
            tagged.append((2, struct.pack(">h", value.client_transaction_version)))
        _write_uvarint(out, len(tagged))
        for tag, data in tagged:
            _write_uvarint(out, tag)
            _write_uvarint(out, len(data))
            out += data
    return bytes(out)


def decode_value(buf: bytes | None) -> TransactionLogValue | None:
    """The value, or None for a tombstone; raises :class:`CorruptMessage` for bad bytes."""
    if buf is None:
        return None
    reader = _Reader(buf)
    version = reader.int16()
    if version not in (0, 1):
        raise CorruptMessage(f"__transaction_state value has unknown version {version}")
    flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader.int8()
    partitions = _read_partitions(reader, flexible)
    last_update = reader.int64()
    start = reader.int64()
    tags = reader.tagged_fields() if flexible else {}
    previous = struct.unpack(">q", tags[0])[0] if 0 in tags else NO_PRODUCER_ID
    next_id = struct.unpack(">q", tags[1])[0] if 1 in tags else NO_PRODUCER_ID
    client_tv = struct.unpack(">h", tags[2])[0] if 2 in tags else 0
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        transaction_partitions=frozenset() if status == _EMPTY_STATUS else partitions,
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
        previous_producer_id=previous,
        next_producer_id=next_id,
        client_transaction_version=client_tv,
    )


def _write_partitions(out: bytearray, value: TransactionLogValue, flexible: bool) -> None:
    if value.transaction_status == _EMPTY_STATUS:
        # null array: compact arrays encode null as length 0, classic ones as -1
        if flexible:
            _write_uvarint(out, 0)
        else:
            out += struct.pack(">i", -1)
        return
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.transaction_partitions):
        by_topic.setdefault(topic, []).append(partition)
    if flexible:
        _write_uvarint(out, len(by_topic) + 1)
    else:
        out += struct.pack(">i", len(by_topic))
    for topic, ids in by_topic.items():
        raw = topic.encode()
        if flexible:
            _write_uvarint(out, len(raw) + 1)
            out += raw
            _write_uvarint(out, len(ids) + 1)
        else:
            out += struct.pack(">h", len(raw)) + raw
            out += struct.pack(">i", len(ids))
        out += struct.pack(f">{len(ids)}i", *ids)
        if flexible:
            _write_uvarint(out, 0)  # no tagged fields in the element


def _read_partitions(reader: _Reader, flexible: bool) -> frozenset[TopicPartition]:
    count = reader.uvarint() - 1 if flexible else reader.int32()
    result: set[TopicPartition] = set()
    for _ in range(max(count, 0)):
        topic = reader.string(flexible)
        n = reader.uvarint() - 1 if flexible else reader.int32()
        for _ in range(max(n, 0)):
            result.add((topic, reader.int32()))
        if flexible:
            reader.tagged_fields()
    return frozenset(result)


def _write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


class _Reader:
    """Bounds-checked big-endian reads; any overrun is a :class:`CorruptMessage`."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptMessage(f"__transaction_state record truncated at byte {self.pos} (wanted {n} more)")
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise CorruptMessage("__transaction_state record has an over-long varint")

    def string(self, flexible: bool) -> str:
        length = self.uvarint() - 1 if flexible else self.int16()
        if length < 0:
            raise CorruptMessage("__transaction_state record has a null string where one is required")
        try:
            return bytes(self._take(length)).decode()
        except UnicodeDecodeError as exc:
            raise CorruptMessage(f"__transaction_state record has a non-UTF-8 string: {exc}")

    def tagged_fields(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = bytes(self._take(self.uvarint()))
        return fields
