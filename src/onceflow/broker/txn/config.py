"""The transaction coordinator's settings, with Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.broker.coordinator.partitioning import java_string_hash, partition_for_key
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "TransactionConfig",
    "java_string_hash",
    "partition_for_key",
]


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    # transactional.id.expiration.ms: an idle id (no transaction open) is removed after this long.
    transactional_id_expiration_ms: int = 604_800_000
    # transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask for.
    transaction_max_timeout_ms: int = 900_000
    # transaction.state.log.num.partitions
    transaction_state_log_num_partitions: int = 50
    # offsets.topic.num.partitions: needed to find a group's __consumer_offsets partition.
    offsets_topic_num_partitions: int = 50
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: how often the broker should call
    # TransactionCoordinator.abort_timed_out_transactions (and retry_incomplete_transactions).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms: how often to call expire_transactional_ids.
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # transaction.two.phase.commit.enable: may a producer ask for two-phase commit (KIP-939)?
    transaction_two_phase_commit_enable: bool = False
