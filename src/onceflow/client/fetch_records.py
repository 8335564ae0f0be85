"""Turn the records of one fetched partition into what a consumer may see (pure, no I/O).

With ``read_committed`` the broker returns data only up to the last stable offset, but that data can
still hold batches of aborted transactions: the response lists, per producer, the first offset of each
aborted transaction, and the consumer drops that producer's transactional batches from there until
the producer's abort marker. Control batches (the markers) are never shown to users. This follows
Kafka's consumer (``CompletedFetch``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from onceflow.protocol.record_codec import DecodedBatch, Record, decode_batches

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


def filter_batches(
    batches: Iterable[DecodedBatch],
    *,
    fetch_offset: int,
    isolation_level: int = READ_UNCOMMITTED,
    aborted_transactions: Iterable[tuple[int, int]] = (),
) -> Iterator[Record]:
    pending = [(first_offset, producer_id) for producer_id, first_offset in aborted_transactions]
    heapq.heapify(pending)
    aborted_producers: set[int] = set()
    for batch in batches:
        header = batch.header
        if isolation_level == READ_COMMITTED and header.producer_id >= 0:
            while pending and pending[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
            if batch.control is not None:
                if not batch.control.commit:
                    aborted_producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_producers:
                continue
        if batch.control is not None:
            continue
        for record in batch.records:
            if record.offset >= fetch_offset:
                yield record
