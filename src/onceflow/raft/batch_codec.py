"""Batches as Kafka stores and sends them: magic-2 record batches whose ``partitionLeaderEpoch`` is
the Raft epoch (the field lies outside the CRC, as Kafka's leader stamps it on append).

A data batch holds the listener's records as record values with null keys (as Kafka's metadata
records are written). A control batch holds one control record whose key is ``(version, type)``:
type 2 is a LeaderChange (``LeaderChangeMessage`` v0 as its value), types 3 and 4 the header and
footer records of a snapshot (``snapshot_format``). Values use Kafka's flexible schema encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from onceflow.protocol.errors import CorruptMessage
from onceflow.protocol.record_codec import decode_record_objects, encode_batch, split_batches
from onceflow.protocol.records import CONTROL_FLAG, build_one_record_batch, set_partition_leader_epoch
from onceflow.protocol.schema_io import SchemaReader, SchemaWriter
from onceflow.raft.records import Batch, LeaderChange

CONTROL_KEY = struct.Struct(">hh")  # version, type
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4


def encode(batch: Batch) -> bytes:
    """The bytes of one batch, offsets and epoch included."""
    if batch.control is not None:
        return encode_control(
            LEADER_CHANGE,
            encode_leader_change(batch.control),
            base_offset=batch.base_offset,
            epoch=batch.epoch,
            timestamp_ms=batch.append_timestamp_ms,
        )
    raw = bytearray(
        encode_batch(
            [(None, record) for record in batch.records],
            base_offset=batch.base_offset,
            timestamp_ms=batch.append_timestamp_ms,
        )
    )
    set_partition_leader_epoch(raw, 0, batch.epoch)
    return bytes(raw)


def encode_all(batches: Iterable[Batch]) -> bytes:
    return b"".join(encode(batch) for batch in batches)


def encode_control(
    control_type: int, value: bytes, *, base_offset: int, epoch: int, timestamp_ms: int
) -> bytes:
    _header, raw = build_one_record_batch(
        CONTROL_KEY.pack(0, control_type),
        value,
        timestamp_ms=timestamp_ms,
        attributes=CONTROL_FLAG,
        base_offset=base_offset,
    )
    set_partition_leader_epoch(raw, 0, epoch)
    return bytes(raw)


def decode(buf: bytes | bytearray | memoryview) -> list[Batch]:
    """Every complete batch in ``buf``, CRC-checked (a trailing partial batch is ignored, as a fetch
    may end inside one). Raises ``CorruptMessage`` for a damaged batch or an unknown control record."""
    batches = []
    for header, view in split_batches(buf, check_crc=True):
        records = decode_record_objects(header, view)
        if header.is_control:
            control_type, value = control_record(header.base_offset, records)
            if control_type != LEADER_CHANGE:
                raise CorruptMessage(
                    f"control record of type {control_type} at offset {header.base_offset} in the metadata log"
                )
            control = decode_leader_change(value)
            batches.append(
                Batch(header.base_offset, header.partition_leader_epoch, header.max_timestamp, (), control)
            )
        else:
            values = tuple(b"" if r.value is None else bytes(r.value) for r in records)
            batches.append(
                Batch(header.base_offset, header.partition_leader_epoch, header.max_timestamp, values)
            )
    return batches


def control_record(base_offset: int, records: list) -> tuple[int, bytes]:
    """``(type, value)`` of the one control record of a control batch."""
    if len(records) != 1 or records[0].key is None or len(records[0].key) < CONTROL_KEY.size:
        raise CorruptMessage(f"control batch at offset {base_offset} must hold one control record")
    _version, control_type = CONTROL_KEY.unpack_from(records[0].key)
    return control_type, b"" if records[0].value is None else bytes(records[0].value)


def encode_leader_change(change: LeaderChange) -> bytes:
    w = SchemaWriter(flexible=True)
    w.int16(0)  # the message's own Version field
    w.int32(change.leader_id)
    for voters in (change.voters, change.granting_voters):
        w.array_len(len(voters))
        for voter_id in voters:
            w.int32(voter_id)
            w.tagged_fields([])
    w.tagged_fields([])
    return w.done()


def decode_leader_change(value: bytes) -> LeaderChange:
    r = SchemaReader(value, "LeaderChangeMessage", flexible=True)
    r.int16()
    leader_id = r.int32()
    lists = []
    for _ in range(2):
        ids = []
        for _ in range(r.array_len()):
            ids.append(r.int32())
            r.tagged_fields()
        lists.append(tuple(ids))
    r.tagged_fields()
    return LeaderChange(leader_id, lists[0], lists[1])
