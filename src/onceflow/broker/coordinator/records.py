"""What crosses between a coordinator, its runtime and its internal topic: records and batches.

A coordinator's state is a fold of the batches of its partitions: data batches of ``(key, value)``
records (``value`` None is a tombstone) and, in ``__consumer_offsets``, the COMMIT/ABORT markers that
end the transactional offset commits of a producer. The same :class:`StoredBatch` is what an
operation asks the runtime to append, what the runtime then replays into the state, and what loading
a partition reads back, so a live write and a reload go through one replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Generic, TypeVar

from onceflow.protocol.errors import KafkaError
from onceflow.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

Record = tuple[bytes, bytes | None]
T = TypeVar("T")

NO_COORDINATOR_EPOCH = -1


@dataclasses.dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch of an internal topic, with what replay needs from its header."""

    records: tuple[Record, ...]
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transactional: bool = False
    # A control batch is a transaction marker: ``commit`` says which one, ``coordinator_epoch`` is the
    # epoch of the transaction coordinator that wrote it (the partition leader fences older ones).
    control: bool = False
    commit: bool = False
    coordinator_epoch: int = NO_COORDINATOR_EPOCH


def marker_batch(
    producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
) -> StoredBatch:
    return StoredBatch(
        (),
        producer_id,
        producer_epoch,
        transactional=True,
        control=True,
        commit=commit,
        coordinator_epoch=coordinator_epoch,
    )


@dataclasses.dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """What an operation returns: the batch to append (none if ``records`` is empty and it is not a
    marker) and the response, plus what to do once the append succeeded or failed.

    - ``on_written``: runs after the append and the replay; for changes that are not in the records
      (timers, a classic group's members) and so must wait until the records are in the log.
    - ``on_failed``: runs when the append failed, with the error the client gets; nothing of the
      state changed, so it only answers (a classic group's waiting members) or leaves a note.
    """

    records: list[Record] = dataclasses.field(default_factory=list)
    response: T | None = None
    batch: StoredBatch | None = None  # set instead of ``records`` for a transactional batch or a marker
    on_written: Callable[[], None] | None = None
    on_failed: Callable[[KafkaError], None] | None = None

    def to_batch(self) -> StoredBatch | None:
        if self.batch is not None:
            return self.batch
        return StoredBatch(tuple(self.records)) if self.records else None
