"""The values the quorum replicates and reasons about: offsets with epochs, and batches.

The Raft core is generic over record bytes: a :class:`Batch` holds the listener's records as opaque
``bytes`` (the controller's metadata records) or, for a control batch, one :class:`LeaderChange`.
Storage encodes batches as Kafka magic-2 record batches (``batch_codec``); the simulator keeps
them as these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class OffsetAndEpoch(NamedTuple):
    """An offset and the epoch of the entry just below it (Kafka's ``OffsetAndEpoch``).

    Used for log ends (``(log end offset, last epoch)``), diverging points and snapshot ids (the
    offset is exclusive: a snapshot at ``(100, 3)`` holds everything below offset 100, and the entry
    at 99 has epoch 3). Ordered as Kafka orders them, epoch first: a log whose last entry has the
    higher epoch is the more up to date whatever its length.
    """

    offset: int
    epoch: int

    def __lt__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self.epoch, self.offset) < (other[1], other[0])

    def __le__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self.epoch, self.offset) <= (other[1], other[0])

    def __gt__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self.epoch, self.offset) > (other[1], other[0])

    def __ge__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self.epoch, self.offset) >= (other[1], other[0])


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """The control record a leader appends first in its epoch (Kafka's ``LeaderChangeMessage``):
    committing it commits everything before it, since a leader may only advance the high watermark
    over an entry of its own epoch."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """A run of entries written together, all of one epoch.

    ``records`` are the listener's records; a control batch has none and holds ``control`` instead
    (it still takes one offset). This is also what the listener's ``handle_commit`` receives.
    """

    base_offset: int
    epoch: int
    append_timestamp_ms: int
    records: tuple[bytes, ...] = ()
    control: LeaderChange | None = None
    # The offset after the batch (computed: read far more often than batches are made).
    next_offset: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        count = 1 if self.control is not None else len(self.records)
        object.__setattr__(self, "next_offset", self.base_offset + count)

    @property
    def record_count(self) -> int:
        return self.next_offset - self.base_offset

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def is_control(self) -> bool:
        return self.control is not None

    def size_in_bytes(self) -> int:
        """About what the batch takes on the wire: the 61-byte header plus each record's bytes."""
        return 61 + sum(len(record) + 8 for record in self.records) + (32 if self.control else 0)

    def at_offset(self, base_offset: int) -> Batch:
        return Batch(base_offset, self.epoch, self.append_timestamp_ms, self.records, self.control)
