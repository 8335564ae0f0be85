"""Building the broker's group coordinator (called once from ``Broker.start``)."""

from __future__ import annotations

from typing import Any

from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.coordinator import GroupCoordinator
from onceflow.broker.group.log_store import LogOffsetsTopic
from onceflow.broker.group.scheduler import AsyncioScheduler


def start_group_coordinator(broker_config: Any, topics: Any) -> GroupCoordinator:
    """Create ``__consumer_offsets`` if needed, replay it, and start offset expiry.

    Must run inside the broker's event loop (timers use it), before the broker serves requests.
    """
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=getattr(broker_config, "group_initial_rebalance_delay_ms", 3000),
    )

    def partition_exists(topic: str, partition: int) -> bool:
        t = topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    coordinator = GroupCoordinator(
        config,
        AsyncioScheduler(),
        LogOffsetsTopic(topics, config.offsets_topic_num_partitions),
        partition_exists=partition_exists,
    )
    coordinator.load()
    coordinator.start_expiry()
    return coordinator
