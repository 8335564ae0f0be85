"""Settings of the group coordinator, with Kafka's broker config names and defaults."""

from __future__ import annotations

import dataclasses

from onceflow.broker.group.consumer_group import ConsumerGroupConfig


@dataclasses.dataclass(frozen=True)
class GroupCoordinatorConfig:
    # group.initial.rebalance.delay.ms: how long a new (empty) group waits for more members before
    # its first generation. Kafka's default; `onceflow serve --dev` sets 0.
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = 2147483647
    # offsets.topic.num.partitions: Kafka's default is 50. With one broker every partition lives
    # here anyway, and each one is a directory of open files and a replay at start, so we use 10;
    # the group's partition is still Kafka's abs(java hashCode(group id)) % n.
    offsets_topic_num_partitions: int = 10
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    # Kafka caps one member's protocol metadata only through message.max.bytes; we refuse a JoinGroup
    # whose protocols add up to more than this (1 MiB) rather than persist it.
    group_max_member_metadata_bytes: int = 1048576
    # group.consumer.*: groups of the consumer protocol (KIP-848).
    consumer: ConsumerGroupConfig = dataclasses.field(default_factory=ConsumerGroupConfig)

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60 * 1000
