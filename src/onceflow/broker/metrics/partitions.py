"""What the partitions hold, read at scrape time: ReplicaManager's gauges, each partition's log
(``kafka.log:type=Log``) and replica state (``kafka.cluster:type=Partition``), and the topic and
offset gauges of kafka_exporter (``kafka_topic_partition_current_offset``, ...), which dashboards of
consumer lag read beside ``kafka_consumergroup_lag``.

Every broker reports the partitions it holds a log of. Which of them it leads is the partition's
``leader_id`` (what the metadata image says); replicas and in-sync replicas are the image's
(``metadata``: a node's ``ClusterMetadata``), so that under-replicated and under-min-ISR partitions
are counted from the same ISR the controller keeps. A partition the image does not know (a broker
without a node) is its own only replica and in sync.

ISR shrinks and expands are counted where the leader changes its ISR (:class:`ReplicaStats`: the
replication work calls ``isr_changed``); they stay 0 while every partition has one replica.

A *late* transaction (``PartitionsWithLateTransactionsCount``, Kafka's KIP-664 gauge) is one whose
producer last wrote to the partition more than ``transaction.max.timeout.ms`` plus five minutes ago
and that still holds the partition's last stable offset back.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from onceflow.broker.metrics.families import Families, jmx

# Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS.
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


def late_transaction(plog: Any, now_ms: int, max_timeout_ms: int) -> bool:
    """Whether the oldest open transaction of a partition is late (see the module's docstring)."""
    state = plog.producer_state
    if state.first_unstable_offset() is None:
        return False
    oldest = state.ongoing_transactions()[0]
    entry = state.last_entry(oldest.producer_id)
    last = entry.last_timestamp if entry is not None else -1
    return last > 0 and now_ms - last > max_timeout_ms + LATE_TRANSACTION_BUFFER_MS


class ReplicaStats:
    """ISR changes of the partitions this broker leads (ReplicaManager's IsrShrinksPerSec and
    IsrExpandsPerSec). The hook for replication: whoever changes a led partition's ISR calls
    :meth:`isr_changed` (through ``services.metrics.replicas`` when metrics are on)."""

    __slots__ = ("shrinks", "expands")

    def __init__(self) -> None:
        self.shrinks = 0
        self.expands = 0

    def isr_changed(self, before: Collection[int], after: Collection[int]) -> None:
        """A led partition's ISR went from ``before`` to ``after`` (as Kafka: smaller is a shrink,
        larger an expand)."""
        if len(after) < len(before):
            self.shrinks += 1
        elif len(after) > len(before):
            self.expands += 1

    def collect(self, families: Families) -> None:
        families.counter(
            jmx("server", "ReplicaManager", "IsrShrinksPerSec"),
            "ISR shrinks of partitions led here.",
            self.shrinks,
        )
        families.counter(
            jmx("server", "ReplicaManager", "IsrExpandsPerSec"),
            "ISR expands of partitions led here.",
            self.expands,
        )


def _replicas(image: Any, topic: str, index: int) -> tuple[int, int]:
    """(replicas, in-sync replicas) of a partition, as the metadata image says."""
    registration = image.partition(topic, index) if image is not None else None
    if registration is None:
        return 1, 1
    return len(registration.replicas), len(registration.isr)


def collect_partitions(
    families: Families, topics: Any, now_ms: int, max_txn_timeout_ms: int, metadata: Any = None
) -> None:
    image = metadata.image if metadata is not None else None
    node_id = topics.node_id
    partitions = leaders = producer_ids = late = under_replicated_n = under_min_isr = at_min_isr = 0
    size = jmx("log", "Log", "Size")
    end = jmx("log", "Log", "LogEndOffset")
    start = jmx("log", "Log", "LogStartOffset")
    segments = jmx("log", "Log", "NumLogSegments")
    in_sync = jmx("cluster", "Partition", "InSyncReplicasCount")
    replicas_name = jmx("cluster", "Partition", "ReplicasCount")
    under_replicated = jmx("cluster", "Partition", "UnderReplicated")
    lso_lag = jmx("cluster", "Partition", "LastStableOffsetLag")
    for topic in topics:
        families.gauge(
            "kafka_topic_partitions", "Partitions of the topic.", len(topic.partitions), {"topic": topic.name}
        )
        for partition in topic.partitions:
            plog = partition.log
            if plog is None:
                continue  # a partition of another broker: it reports it
            labels = {"topic": topic.name, "partition": str(partition.index)}
            hw = plog.high_watermark
            partitions += 1
            n_replicas, n_isr = _replicas(image, topic.name, partition.index)
            leads = partition.leader_id == node_id
            families.gauge(size, "Bytes of the partition's log segments.", plog.size_in_bytes, labels)
            families.gauge(end, "The partition's log end offset.", plog.log_end_offset, labels)
            families.gauge(start, "The partition's log start offset.", plog.log_start_offset, labels)
            families.gauge(
                segments, "Segments of the partition's log.", len(plog.segment_base_offsets()), labels
            )
            families.gauge(in_sync, "Replicas in the partition's ISR.", n_isr, labels)
            families.gauge(replicas_name, "Replicas of the partition.", n_replicas, labels)
            families.gauge(
                under_replicated,
                "1 if the partition is led here and its ISR is smaller than its replicas.",
                int(leads and n_isr < n_replicas),
                labels,
            )
            families.gauge(
                lso_lag,
                "High watermark - last stable offset: records read_committed consumers cannot read yet.",
                hw - plog.last_stable_offset,
                labels,
            )
            families.gauge(
                "kafka_topic_partition_current_offset", "The partition's high watermark.", hw, labels
            )
            families.gauge(
                "kafka_topic_partition_oldest_offset",
                "The partition's log start offset.",
                plog.log_start_offset,
                labels,
            )
            producer_ids += plog.producer_state.producer_count
            late += late_transaction(plog, now_ms, max_txn_timeout_ms)
            if not leads:
                continue
            leaders += 1
            min_isr = plog.config.min_insync_replicas
            under_replicated_n += n_isr < n_replicas
            under_min_isr += n_isr < min_isr
            at_min_isr += n_isr == min_isr
    replica_manager = (
        ("PartitionCount", partitions, "Partitions with a replica on this broker."),
        ("LeaderCount", leaders, "Partitions this broker leads."),
        (
            "UnderReplicatedPartitions",
            under_replicated_n,
            "Partitions led here whose ISR is smaller than their replicas.",
        ),
        (
            "UnderMinIsrPartitionCount",
            under_min_isr,
            "Partitions led here whose ISR is below min.insync.replicas.",
        ),
        (
            "AtMinIsrPartitionCount",
            at_min_isr,
            "Partitions led here whose ISR is exactly min.insync.replicas.",
        ),
        ("OfflineReplicaCount", 0, "Replicas on this broker in an offline log dir (one dir, never)."),
        ("ProducerIdCount", producer_ids, "Producer ids with state in the partitions of this broker."),
        (
            "PartitionsWithLateTransactionsCount",
            late,
            "Partitions whose oldest open transaction is past transaction.max.timeout.ms + 5 minutes.",
        ),
    )
    for name, value, meaning in replica_manager:
        families.gauge(jmx("server", "ReplicaManager", name), meaning, value)
