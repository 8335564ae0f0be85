"""How the group coordinator reaches ``__consumer_offsets``: through the coordinator runtime's
:class:`~onceflow.broker.coordinator.writer.PartitionWriter`.

The broker gives it the internal-topic writer on the partition logs
(:class:`~onceflow.broker.coordinator.internal_topic.InternalTopicWriter`), tests an
:class:`InMemoryOffsetsTopic`. The runtime answers a request only once its records are committed, so a
commit acknowledged to a client is in the log (as durable as the log's flush policy).
"""

from __future__ import annotations

from onceflow.broker.coordinator.records import Record, StoredBatch
from onceflow.broker.coordinator.writer import InMemoryPartitionWriter, PartitionWriter

OffsetsTopic = PartitionWriter

__all__ = ["InMemoryOffsetsTopic", "OffsetsTopic", "Record", "StoredBatch"]


class InMemoryOffsetsTopic(InMemoryPartitionWriter):
    """``__consumer_offsets`` in lists, for tests: ``fail_appends`` simulates a broken disk,
    ``write_marker`` a marker appended from outside the coordinator."""
