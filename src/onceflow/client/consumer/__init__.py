"""onceflow's consumer: :class:`AsyncConsumer` (asyncio) and :class:`Consumer` (blocking facade)."""

from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.consumer import AsyncConsumer, NoOffsetForPartition
from onceflow.client.consumer.offset_commit import CommitFailed, ConsumerTimeout, RebalanceInProgress
from onceflow.client.consumer.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)
from onceflow.client.consumer.sync import Consumer

__all__ = [
    "AsyncConsumer",
    "CommitFailed",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "ConsumerTimeout",
    "NoOffsetForPartition",
    "OffsetAndMetadata",
    "RebalanceInProgress",
    "TopicPartition",
]
