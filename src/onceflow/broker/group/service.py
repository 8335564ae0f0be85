"""Building the broker's group coordinator (called once from ``Broker.start``)."""

from __future__ import annotations

import uuid
from typing import Any

from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_groups import ConsumerGroupConfig
from onceflow.broker.group.coordinator import GroupCoordinator
from onceflow.broker.group.log_store import LogOffsetsTopic
from onceflow.broker.group.scheduler import AsyncioScheduler


def start_group_coordinator(broker_config: Any, topics: Any) -> GroupCoordinator:
    """Create ``__consumer_offsets`` if needed, replay it, and start offset expiry.

    Must run inside the broker's event loop (timers use it), before the broker serves requests.
    """
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=getattr(broker_config, "group_initial_rebalance_delay_ms", 3000),
        consumer=ConsumerGroupConfig(
            heartbeat_interval_ms=getattr(broker_config, "group_consumer_heartbeat_interval_ms", 5000),
            session_timeout_ms=getattr(broker_config, "group_consumer_session_timeout_ms", 45000),
        ),
    )

    def partition_exists(topic: str, partition: int) -> bool:
        t = topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    coordinator = GroupCoordinator(
        config,
        AsyncioScheduler(),
        LogOffsetsTopic(topics, config.offsets_topic_num_partitions),
        partition_exists=partition_exists,
        topic_lookup=_Topics(topics),
    )
    coordinator.load()
    coordinator.start_expiry()
    return coordinator


class _Topics:
    """The consumer groups' view of the topic registry (``TopicLookup``)."""

    def __init__(self, topics: Any) -> None:
        self._topics = topics

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        t = self._topics.get(name)
        return None if t is None else (t.topic_id, len(t.partitions))

    def topic_names(self) -> list[str]:
        return [t.name for t in self._topics if not t.internal]
