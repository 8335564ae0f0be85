"""The transaction coordinator's settings, with Kafka's broker config names and defaults."""

from __future__ import annotations

import functools
from dataclasses import dataclass

TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


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


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, int32 wrap-around)."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


# Producers and groups send the same few ids with every request: remember the answers (bounded, so a
# flood of distinct ids cannot grow it without limit).
@functools.lru_cache(maxsize=8192)
def partition_for_key(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % n``, used for both ``__transaction_state`` and
    ``__consumer_offsets`` (Utils.abs is Math.abs except that MIN_VALUE maps to 0; it must agree with
    the group coordinator's ``partition_for_group``)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
