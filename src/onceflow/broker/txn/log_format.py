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

import functools
import struct
from dataclasses import dataclass

from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.internal_topics import TRANSACTION_STATE_TOPIC
from onceflow.protocol.records import NO_PRODUCER_ID
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter

KEY_VERSION = 0
VALUE_VERSION = 1  # the version we write; we read 0 and 1


TopicPartition = tuple[str, int]

TRANSACTION_STATE_RECORD = TRANSACTION_STATE_TOPIC  # names the topic in CorruptMessage texts


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


@functools.lru_cache(maxsize=8192)  # the same few ids are written again and again
def encode_key(transactional_id: str) -> bytes:
    writer = SchemaWriter()
    writer.int16(KEY_VERSION)
    writer.string(transactional_id)
    return writer.done()


@functools.lru_cache(maxsize=65536)  # every record is replayed; ids repeat (bounded, as partition_for_key)
def decode_key(buf: bytes) -> str:
    """The transactional id of a key; raises :class:`CorruptMessage` for unknown versions or bad bytes."""
    reader = SchemaReader(buf, TRANSACTION_STATE_RECORD)
    version = reader.int16()
    if version != KEY_VERSION:
        raise CorruptMessage(f"__transaction_state key has unknown version {version}")
    return reader.string()


# -- value -------------------------------------------------------------------------------------------


_VALUE_HEAD = struct.Struct(">hqhib")  # version, producerId, producerEpoch, timeoutMs, status
_VALUE_TIMES = struct.Struct(">qq")  # lastUpdateTimestampMs, startTimestampMs
_TAG_INT64 = struct.Struct(">BBq")  # tag, size 8, value (tags and sizes < 128: one-byte uvarints)
_TAG_INT16 = struct.Struct(">BBh")


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    return encode_value_fields(
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        value.transaction_status,
        value.transaction_partitions,
        value.transaction_last_update_timestamp_ms,
        value.transaction_start_timestamp_ms,
        value.previous_producer_id,
        value.next_producer_id,
        value.client_transaction_version,
        version=version,
    )


def encode_value_fields(
    producer_id: int,
    producer_epoch: int,
    transaction_timeout_ms: int,
    transaction_status: int,
    transaction_partitions: frozenset[TopicPartition],
    transaction_last_update_timestamp_ms: int,
    transaction_start_timestamp_ms: int,
    previous_producer_id: int = NO_PRODUCER_ID,
    next_producer_id: int = NO_PRODUCER_ID,
    client_transaction_version: int = 0,
    *,
    version: int = VALUE_VERSION,
) -> bytes:
    """:func:`encode_value` from the fields themselves (the coordinator's path: no value object)."""
    # Struct packing rather than field-by-field SchemaWriter calls: the coordinator writes one of
    # these per state change, several per transaction.
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} is not supported (0 or 1)")
    flexible = version >= 1
    empty = transaction_status == _EMPTY_STATUS
    parts = [
        _VALUE_HEAD.pack(version, producer_id, producer_epoch, transaction_timeout_ms, transaction_status),
        # Kafka writes a null array for Empty.
        _partitions_bytes(None if empty else transaction_partitions, flexible),
        _VALUE_TIMES.pack(transaction_last_update_timestamp_ms, transaction_start_timestamp_ms),
    ]
    if flexible:
        tagged = []
        if previous_producer_id != NO_PRODUCER_ID:
            tagged.append(_TAG_INT64.pack(0, 8, previous_producer_id))
        if next_producer_id != NO_PRODUCER_ID:
            tagged.append(_TAG_INT64.pack(1, 8, next_producer_id))
        if client_transaction_version != 0:
            tagged.append(_TAG_INT16.pack(2, 2, client_transaction_version))
        parts.append(bytes((len(tagged),)))
        parts.extend(tagged)
    return b"".join(parts)


def decode_value(buf: bytes | None) -> TransactionLogValue | None:
    """The value, or None for a tombstone; raises :class:`CorruptMessage` for bad bytes."""
    if buf is None:
        return None
    reader = SchemaReader(buf, TRANSACTION_STATE_RECORD)
    version = reader.int16()
    if version not in (0, 1):
        raise CorruptMessage(f"__transaction_state value has unknown version {version}")
    reader.flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader.int8()
    partitions = _read_partitions(reader)
    last_update = reader.int64()
    start = reader.int64()
    tags = reader.tagged_fields()
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


@functools.lru_cache(maxsize=1024)  # a producer's transactions usually span the same partitions
def _partitions_bytes(partitions: frozenset[TopicPartition] | None, flexible: bool) -> bytes:
    """The ``TransactionPartitions`` array (None: a null array), grouped by topic in sorted order."""
    writer = SchemaWriter(flexible)
    if partitions is None:
        writer.array_len(None)
        return writer.done()
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    writer.array_len(len(by_topic))
    for topic, ids in by_topic.items():
        writer.string(topic)
        writer.array_len(len(ids))
        for partition in ids:
            writer.int32(partition)
        if flexible:
            writer.tagged_fields([])  # none in the element
    return writer.done()


def _read_partitions(reader: SchemaReader) -> frozenset[TopicPartition]:
    result: set[TopicPartition] = set()
    for _ in range(reader.array_len()):
        topic = reader.string()
        for _ in range(reader.array_len()):
            result.add((topic, reader.int32()))
        reader.tagged_fields()
    return frozenset(result)
