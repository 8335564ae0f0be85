"""Turn the records of one fetched partition into what a consumer may see (pure, no I/O).

With ``read_committed`` the broker returns data only up to the last stable offset, but that data can
still hold batches of aborted transactions: the response lists, per producer, the first offset of each
aborted transaction, and the consumer drops that producer's transactional batches from there until
the producer's abort marker. Control batches (the markers) are never shown to consumers. This follows
Kafka's consumer (``CompletedFetch``). Tools that show a log as it is (the console's message browser)
use :func:`records_and_markers`, which keeps the markers.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from onceflow.protocol.record_codec import ControlMarker, DecodedBatch, Record, decode_batches
from onceflow.protocol.records import BatchHeader

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def visible_records(
    records: bytes | memoryview | None,
    *,
    fetch_offset: int,
    isolation_level: int = READ_UNCOMMITTED,
    aborted_transactions: Iterable[tuple[int, int]] = (),
) -> tuple[list[Record], int]:
    """The user records at or after ``fetch_offset`` in a fetched record set, and the offset to fetch
    next (past every complete batch, including control batches and aborted ones).

    ``aborted_transactions`` holds ``(producer_id, first_offset)`` pairs from the fetch response.
    """
    if not records:
        return [], fetch_offset
    batches = list(decode_batches(records))
    visible = list(
        filter_batches(
            batches,
            fetch_offset=fetch_offset,
            isolation_level=isolation_level,
            aborted_transactions=aborted_transactions,
        )
    )
    next_offset = max(fetch_offset, batches[-1].header.last_offset + 1) if batches else fetch_offset
    return visible, next_offset


class AbortedTransactions:
    """read_committed's view of one fetched partition, batch by batch in offset order: which
    transactional batches belong to an aborted transaction (Kafka's ``CompletedFetch`` rule).

    A producer's batches are dropped from the first offset of its aborted transaction (from the
    response's list) until its abort marker."""

    __slots__ = ("_pending", "_aborted_producers")

    def __init__(self, aborted_transactions: Iterable[tuple[int, int]]) -> None:
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted_transactions]
        heapq.heapify(self._pending)
        self._aborted_producers: set[int] = set()

    def is_aborted(self, header: BatchHeader, control: ControlMarker | None = None) -> bool:
        """Whether the data batch with ``header`` is aborted; give every control batch's marker too
        (an abort marker ends its producer's aborted run)."""
        if header.producer_id < 0:
            return False
        pending = self._pending
        while pending and pending[0][0] <= header.last_offset:
            self._aborted_producers.add(heapq.heappop(pending)[1])
        if control is not None:
            if not control.commit:
                self._aborted_producers.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._aborted_producers


def filter_batches(
    batches: Iterable[DecodedBatch],
    *,
    fetch_offset: int,
    isolation_level: int = READ_UNCOMMITTED,
    aborted_transactions: Iterable[tuple[int, int]] = (),
) -> Iterator[Record]:
    aborted = AbortedTransactions(aborted_transactions) if isolation_level == READ_COMMITTED else None
    for batch in batches:
        if aborted is not None and aborted.is_aborted(batch.header, batch.control):
            continue
        if batch.control is not None:
            continue
        for record in batch.records:
            if record.offset >= fetch_offset:
                yield record


class Marker(NamedTuple):
    """A transaction marker (control record) at ``offset``: the end of a transaction of ``producer_id``."""

    offset: int
    timestamp: int
    producer_id: int
    producer_epoch: int
    commit: bool


class BrowsedRecord(NamedTuple):
    """A data record with the batch facts a log browser shows beside it."""

    record: Record
    producer_id: int
    transactional: bool

    @property
    def offset(self) -> int:
        return self.record.offset


def records_and_markers(
    records: bytes | memoryview | None,
    *,
    fetch_offset: int,
    isolation_level: int = READ_UNCOMMITTED,
    aborted_transactions: Iterable[tuple[int, int]] = (),
) -> tuple[list[BrowsedRecord | Marker], int, int]:
    """What a log browser shows of a fetched record set from ``fetch_offset``: data records and
    transaction markers in offset order; with read_committed, records of aborted transactions are
    left out (as a consumer's), markers kept. Returns ``(entries, next offset, records hidden)``."""
    if not records:
        return [], fetch_offset, 0
    batches = list(decode_batches(records))
    aborted = AbortedTransactions(aborted_transactions) if isolation_level == READ_COMMITTED else None
    entries: list[BrowsedRecord | Marker] = []
    hidden = 0
    for batch in batches:
        header = batch.header
        # Every batch goes through the aborted-transaction tracker, also those before the fetch
        # offset: a marker there ends its producer's aborted run.
        if batch.control is not None:
            if aborted is not None:
                aborted.is_aborted(header, batch.control)
            if header.base_offset < fetch_offset:
                continue
            entries.append(
                Marker(
                    header.base_offset,
                    header.max_timestamp,
                    header.producer_id,
                    header.producer_epoch,
                    batch.control.commit,
                )
            )
            continue
        if aborted is not None and aborted.is_aborted(header):
            hidden += sum(1 for r in batch.records if r.offset >= fetch_offset)
            continue
        entries.extend(
            BrowsedRecord(r, header.producer_id, header.is_transactional)
            for r in batch.records
            if r.offset >= fetch_offset
        )
    next_offset = max(fetch_offset, batches[-1].header.last_offset + 1) if batches else fetch_offset
    return entries, next_offset, hidden
