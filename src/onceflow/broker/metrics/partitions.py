"""What the partitions hold, read at scrape time: ReplicaManager's gauges, each partition's log
(``kafka.log:type=Log``) and replica state (``kafka.cluster:type=Partition``), and the topic and
offset gauges of kafka_exporter (``kafka_topic_partition_current_offset``, ...), which dashboards of
consumer lag read beside ``kafka_consumergroup_lag``.

One broker holds every replica and leads every partition: the in-sync replica set is the leader
alone, nothing is under-replicated, ISR shrinks and expands never happen. The gauges say so honestly
(``AtMinIsrPartitionCount`` counts partitions whose ``min.insync.replicas`` is 1), and replication
changes only where these numbers come from.

A *late* transaction (``PartitionsWithLateTransactionsCount``, Kafka's KIP-664 gauge) is one whose
producer last wrote to the partition more than ``transaction.max.timeout.ms`` plus five minutes ago
and that still holds the partition's last stable offset back.
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.metrics.families import Families, jmx

# Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS.
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000
REPLICAS = 1  # this broker's replica of each partition is the only one


def late_transaction(plog: Any, now_ms: int, max_timeout_ms: int) -> bool:
    """Whether the oldest open transaction of a partition is late (see the module's docstring)."""
    state = plog.producer_state
    if state.first_unstable_offset() is None:
        return False
    oldest = state.ongoing_transactions()[0]
    entry = state.last_entry(oldest.producer_id)
    last = entry.last_timestamp if entry is not None else -1
    return last > 0 and now_ms - last > max_timeout_ms + LATE_TRANSACTION_BUFFER_MS


def collect_partitions(families: Families, topics: Any, now_ms: int, max_txn_timeout_ms: int) -> None:
    partitions = producer_ids = late = under_min_isr = at_min_isr = 0
    size = jmx("log", "Log", "Size")
    end = jmx("log", "Log", "LogEndOffset")
    start = jmx("log", "Log", "LogStartOffset")
    segments = jmx("log", "Log", "NumLogSegments")
    in_sync = jmx("cluster", "Partition", "InSyncReplicasCount")
    replicas = jmx("cluster", "Partition", "ReplicasCount")
    under_replicated = jmx("cluster", "Partition", "UnderReplicated")
    lso_lag = jmx("cluster", "Partition", "LastStableOffsetLag")
    for topic in topics:
        families.gauge(
            "kafka_topic_partitions", "Partitions of the topic.", len(topic.partitions), {"topic": topic.name}
        )
        for partition in topic.partitions:
            plog = partition.log
            labels = {"topic": topic.name, "partition": str(partition.index)}
            hw = plog.high_watermark
            partitions += 1
            families.gauge(size, "Bytes of the partition's log segments.", plog.size_in_bytes, labels)
            families.gauge(end, "The partition's log end offset.", plog.log_end_offset, labels)
            families.gauge(start, "The partition's log start offset.", plog.log_start_offset, labels)
            families.gauge(
                segments, "Segments of the partition's log.", len(plog.segment_base_offsets()), labels
            )
            families.gauge(in_sync, "Replicas in the partition's ISR.", REPLICAS, labels)
            families.gauge(replicas, "Replicas of the partition.", REPLICAS, labels)
            families.gauge(
                under_replicated, "1 if the partition's ISR is smaller than its replicas.", 0, labels
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
            min_isr = plog.config.min_insync_replicas
            under_min_isr += min_isr > REPLICAS
            at_min_isr += min_isr == REPLICAS
            late += late_transaction(plog, now_ms, max_txn_timeout_ms)
    replica_manager = (
        ("PartitionCount", partitions, "Partitions with a replica on this broker."),
        ("LeaderCount", partitions, "Partitions this broker leads."),
        ("UnderReplicatedPartitions", 0, "Partitions led here whose ISR is smaller than their replicas."),
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
        ("OfflineReplicaCount", 0, "Replicas on this broker that are offline."),
        ("ProducerIdCount", producer_ids, "Producer ids with state in the partitions of this broker."),
        (
            "PartitionsWithLateTransactionsCount",
            late,
            "Partitions whose oldest open transaction is past transaction.max.timeout.ms + 5 minutes.",
        ),
    )
    for name, value, meaning in replica_manager:
        families.gauge(jmx("server", "ReplicaManager", name), meaning, value)
    families.counter(jmx("server", "ReplicaManager", "IsrShrinksPerSec"), "ISR shrinks.", 0)
    families.counter(jmx("server", "ReplicaManager", "IsrExpandsPerSec"), "ISR expands.", 0)
