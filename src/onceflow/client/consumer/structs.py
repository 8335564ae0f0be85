"""Small value types the consumer hands to users (and the producer takes for KIP-447)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to read, and free-form metadata."""

    offset: int
    metadata: str = ""


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Who is committing, for ``send_offsets_to_transaction`` (KIP-447): the group coordinator fences
    a transactional commit from a member whose generation is stale, so a zombie that lost its
    partitions cannot commit offsets for them."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
