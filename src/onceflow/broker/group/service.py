"""The broker's group coordinator, as its handlers use it.

:class:`GroupCoordinator` answers at once (sans-IO); :class:`GroupService` is what the handlers await:
each answer is returned once the records of its operation, and every record written before them on
the group's ``__consumer_offsets`` partition, are committed (``coordinator.commits``), so no client
ever hears of a state that a failover could lose. If the partition moves away meanwhile the answer is
NOT_COORDINATOR. JoinGroup and SyncGroup answers wait the same way, inside the coordinator.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from onceflow.broker.coordinator.commits import committed
from onceflow.broker.coordinator.internal_topic import InternalTopicWriter
from onceflow.broker.coordinator.scheduler import AsyncioScheduler
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
)
from onceflow.broker.group.coordinator import GroupCoordinator, OffsetCommitEntry
from onceflow.broker.group.descriptions import GroupDescription, GroupListing
from onceflow.broker.group.handler_support import await_callback
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.broker.group.offsets import CommittedOffset, TopicPartition
from onceflow.broker.group.requests import JoinRequest, JoinResult, SyncResult
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC

if TYPE_CHECKING:
    from onceflow.broker.config import BrokerConfig
    from onceflow.broker.faults import Faults
    from onceflow.broker.topics import TopicManager

FetchedOffsets = list[tuple[TopicPartition, CommittedOffset | None, ErrorCode]]


class GroupService:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self._runtime = coordinator.runtime

    def partition_for(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    async def _committed(self, group_id: str) -> None:
        await committed(self._runtime, self.coordinator.partition_for(group_id))

    def shutdown(self) -> None:
        self.coordinator.shutdown()

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live classic group (read-only: tests, tools)."""
        return self.coordinator.group(group_id)

    # -- membership ----------------------------------------------------------------------------------

    async def join_group(self, req: JoinRequest) -> JoinResult:
        return await await_callback(lambda respond: self.coordinator.join_group(req, respond))

    async def sync_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        assignments: dict[str, bytes],
        *,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        return await await_callback(
            lambda respond: self.coordinator.sync_group(
                group_id,
                member_id,
                group_instance_id,
                generation_id,
                assignments,
                respond,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            )
        )

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self.coordinator.heartbeat(group_id, member_id, group_instance_id, generation_id)
        try:
            await self._committed(group_id)
        except KafkaError as exc:
            return exc.code
        return error

    async def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        answer = self.coordinator.leave_group(group_id, members)
        try:
            await self._committed(group_id)
        except KafkaError as exc:
            return exc.code, []
        return answer

    async def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """Raises :class:`KafkaError` with the answer's code."""
        result = self.coordinator.consumer_group_heartbeat(req)
        await self._committed(req.group_id)
        return result

    # -- offsets -------------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
        *,
        api_version: int,
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        answer = self.coordinator.commit_offsets(
            group_id, member_id, group_instance_id, generation_id, offsets, api_version=api_version
        )
        try:
            await self._committed(group_id)
        except KafkaError as exc:
            return ErrorCode.NONE, dict.fromkeys(offsets, exc.code)
        return answer

    def check_txn_member(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        return self.coordinator.check_txn_member(group_id, member_id, group_instance_id, generation_id)

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """Raises :class:`KafkaError` with the code for every partition."""
        answer = self.coordinator.commit_txn_offsets(group_id, producer_id, producer_epoch, offsets)
        await self._committed(group_id)
        return answer

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, FetchedOffsets]:
        answer = self.coordinator.fetch_offsets(
            group_id,
            partitions,
            require_stable=require_stable,
            member_id=member_id,
            member_epoch=member_epoch,
        )
        await self._committed(group_id)
        return answer

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        answer = self.coordinator.delete_offsets(group_id, partitions)
        try:
            await self._committed(group_id)
        except KafkaError as exc:
            return exc.code, {}
        return answer

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        return self.coordinator.on_partitions_deleted(partitions)

    def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> None:
        """A transaction marker for ``__consumer_offsets``-``partition`` (see
        :meth:`GroupCoordinator.complete_transaction`)."""
        self.coordinator.complete_transaction(
            partition, producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch
        )

    # -- admin ---------------------------------------------------------------------------------------

    async def describe_group(self, group_id: str) -> GroupDescription:
        answer = self.coordinator.describe_group(group_id)
        await self._committed(group_id)
        return answer

    async def consumer_group(self, group_id: str) -> ConsumerGroup:
        group = self.coordinator.consumer_group(group_id)
        await self._committed(group_id)
        return group

    async def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        listed = self.coordinator.list_groups(states, types)
        for partition in self._runtime.active_partitions():
            await committed(self._runtime, partition)
        return listed

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results = self.coordinator.delete_groups(group_ids)
        for group_id in group_ids:
            if results.get(group_id) is ErrorCode.NONE:
                try:
                    await self._committed(group_id)
                except KafkaError as exc:
                    results[group_id] = exc.code
        return results


def group_coordinator_config(broker_config: BrokerConfig) -> GroupCoordinatorConfig:
    return GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=broker_config.group_initial_rebalance_delay_ms,
        consumer=ConsumerGroupConfig(
            heartbeat_interval_ms=broker_config.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=broker_config.group_consumer_session_timeout_ms,
        ),
    )


def start_group_coordinator(
    broker_config: BrokerConfig,
    topics: TopicManager,
    faults: Faults | None = None,
    owned: Mapping[int, int] | None = None,
) -> GroupService:
    """Load ``__consumer_offsets`` (created on the first write, as Kafka does) and start offset expiry.

    Must run inside the broker's event loop (timers use it), before the broker serves requests.
    """
    config = group_coordinator_config(broker_config)

    def partition_exists(topic: str, partition: int) -> bool:
        t = topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    coordinator = GroupCoordinator(
        config,
        AsyncioScheduler(),
        InternalTopicWriter(topics, CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, faults),
        partition_exists=partition_exists,
        topic_lookup=_Topics(topics),
    )
    coordinator.load(owned)
    coordinator.start_expiry()
    return GroupService(coordinator)


class _Topics:
    """The consumer groups' view of the topic registry (``TopicLookup``)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        t = self._topics.get(name)
        return None if t is None else (t.topic_id, len(t.partitions))

    def topic_names(self) -> list[str]:
        return [t.name for t in self._topics if not t.internal]
