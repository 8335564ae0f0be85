"""The broker settings of partition replication (Kafka's names and defaults), and what a partition asks
of the cluster's metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    broker_id: int
    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    replica_fetch_max_bytes: int = 1_048_576  # replica.fetch.max.bytes (per partition)
    replica_fetch_response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    replica_fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    replica_fetch_backoff_ms: int = 1_000  # replica.fetch.backoff.ms
    replica_high_watermark_checkpoint_interval_ms: int = (
        5_000  # replica.high.watermark.checkpoint.interval.ms
    )

    @property
    def isr_check_interval_ms(self) -> int:
        """How often leaders look for followers to drop from the ISR (Kafka: half the lag time)."""
        return max(self.replica_lag_time_max_ms // 2, 1)


class BrokerView(Protocol):
    """What a partition leader needs to know of other brokers (the metadata image answers it)."""

    def broker_epoch(self, broker_id: int) -> int | None:
        """The registered epoch of ``broker_id``, None if it is not registered."""

    def isr_eligible(self, broker_id: int) -> bool:
        """Whether ``broker_id`` may join an ISR: registered, not fenced, not shutting down."""


def replica_config(broker_config: object, broker_id: int) -> ReplicaConfig:
    """The replication settings of a ``BrokerConfig`` (Kafka's ``replica.*`` names)."""
    c = broker_config
    return ReplicaConfig(
        broker_id=broker_id,
        replica_lag_time_max_ms=c.replica_lag_time_max_ms,
        replica_fetch_max_bytes=c.replica_fetch_max_bytes,
        replica_fetch_response_max_bytes=c.replica_fetch_response_max_bytes,
        replica_fetch_wait_max_ms=c.replica_fetch_wait_max_ms,
        replica_fetch_min_bytes=c.replica_fetch_min_bytes,
        replica_fetch_backoff_ms=c.replica_fetch_backoff_ms,
        replica_high_watermark_checkpoint_interval_ms=c.replica_high_watermark_checkpoint_interval_ms,
    )
