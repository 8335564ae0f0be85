"""Transaction markers: what the coordinator asks to be written when a transaction ends.

A marker is a control batch (COMMIT or ABORT) with the producer id and epoch of the transaction and the
coordinator epoch, written to every partition of the transaction, ``__consumer_offsets`` included
when offsets were added. The coordinator builds :class:`TxnMarker` values; the broker supplies a
:class:`MarkerWriter` that appends them (locally, the same path as a WriteTxnMarkers request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from onceflow.broker.txn.log_format import TopicPartition


@dataclass(frozen=True, slots=True)
class TxnMarker:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    transaction_version: int  # WriteTxnMarkers v2 carries it; TV_2 markers carry the bumped epoch

    def partitions_by_topic(self) -> dict[str, list[int]]:
        """The WriteTxnMarkers request shape: topic -> sorted partition ids."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return by_topic


class MarkerWriter(Protocol):
    async def write_markers(self, marker: TxnMarker) -> None:
        """Append the marker to every partition in ``marker.partitions`` and return once all are in
        the log. Skip partitions that no longer exist (Kafka drops markers for deleted topics).
        Raise a :class:`~onceflow.protocol.errors.KafkaError` if any write failed: the coordinator
        keeps the transaction in PrepareCommit/PrepareAbort and writes the markers again later
        (so the log must accept a marker for a producer with no open transaction, as Kafka's does)."""
        ...
