"""How the coordinator reaches ``__consumer_offsets``: append records, replay batches.

The coordinator only sees :class:`OffsetsTopic`; the broker gives it one backed by the partition
``Log``s (:mod:`onceflow.broker.group.log_store`), tests an :class:`InMemoryOffsetsTopic`.
``append`` returns only after the records are in the log, so a commit acknowledged to a client is
durable (as durable as the log's flush policy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Protocol

Record = tuple[bytes, bytes | None]


@dataclasses.dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch read back from the topic, with what replay needs from its header."""

    records: tuple[Record, ...]
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False
    # A control batch is a transaction marker: ``commit`` says which one.
    control: bool = False
    commit: bool = False


class OffsetsTopic(Protocol):
    num_partitions: int

    def append(
        self,
        partition: int,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None: ...

    def replay(self, partition: int) -> Iterable[StoredBatch]: ...


class InMemoryOffsetsTopic:
    """An :class:`OffsetsTopic` in lists, for tests; ``fail_appends`` simulates a broken disk."""

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.batches: dict[int, list[StoredBatch]] = {p: [] for p in range(num_partitions)}
        self.fail_appends: Exception | None = None

    def append(
        self,
        partition: int,
        records: list[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        if self.fail_appends is not None:
            raise self.fail_appends
        self.batches[partition].append(
            StoredBatch(tuple(records), producer_id, producer_epoch, transactional)
        )

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, *, commit: bool) -> None:
        self.batches[partition].append(
            StoredBatch((), producer_id, producer_epoch, transactional=True, control=True, commit=commit)
        )

    def replay(self, partition: int) -> Iterator[StoredBatch]:
        return iter(list(self.batches[partition]))
