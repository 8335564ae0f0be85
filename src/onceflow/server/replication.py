"""Partition replication on a node: the broker's ``ReplicaManager`` and its asyncio service, wired to
the node's metadata, logs, peers and controller channel.

- Each new metadata image (after the topics' logs were opened or deleted for it) goes to the replica
  manager, which makes this broker leader or follower of its partitions; the broker's ``Partition``
  objects then append through the manager (leader epochs in the batches, the high watermark) and know
  their replica.
- Fetcher requests go to the leader's endpoint on the inter-broker listener (through the node's peer
  connections), AlterPartition through the controller channel.
- A leader's high watermark that moves wakes the consumers long-polling the partition (they read
  below it) and releases the coordinators' answers waiting for their records to be committed.
- Becoming leader or follower of a ``__consumer_offsets`` or ``__transaction_state`` partition loads
  or unloads it in its coordinator (``server.coordinator_failover``; coordinator epoch = leader epoch).
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.broker.replica.config import replica_config
from onceflow.broker.replica.manager import ReplicaManager
from onceflow.broker.replica.service import ReplicationService
from onceflow.log.offset_checkpoint import high_watermark_path
from onceflow.protocol.errors import KafkaError
from onceflow.server.coordinator_failover import CoordinatorFailover

log = logging.getLogger(__name__)


class NodeReplication:
    def __init__(self, node: Any) -> None:
        self.node = node
        config = node.config
        self.topics = node.broker.topics
        self.manager = ReplicaManager(
            replica_config(config, node.node_id),
            self._open_log,
            checkpoint_path=high_watermark_path(node.data_dir),
            request_timeout_ms=30_000,
            on_high_watermark=self._high_watermark_moved,
            on_leadership=self._leadership_changed,
        )
        self.coordinators = CoordinatorFailover(self._leaderships)
        self.service = ReplicationService(
            self.manager,
            self._send_to_broker,
            lambda api_key, version, request: node.channel.send(api_key, version, request),
            lambda: node.metadata.image.topic_ids,
        )
        self.listener = node.server.inter_broker_listener_name or node.server.broker_listeners()[0].name

    # -- hooks --

    def on_image(self, image: Any) -> None:
        """A new metadata image was published to the topics' logs: act on it."""
        now = self.service._clock_ms()  # noqa: SLF001 - the service's clock is the manager's
        self.manager.apply_image(image, now)
        for key, replica in self.manager.partitions.items():
            partition = self._topic_partition(key)
            if partition is not None and partition.replica is not replica:
                partition.replica = replica
                partition.appender = self._appender(key)
        self.service.wake()

    def set_broker_epoch(self, epoch: int) -> None:
        self.manager.broker_epoch = epoch
        self.service.wake()

    # -- internals --

    def _topic_partition(self, key: tuple[str, int]) -> Any:
        topic = self.topics.get(key[0])
        if topic is None or key[1] >= len(topic.partitions):
            return None
        return topic.partitions[key[1]]

    def _open_log(self, topic: str, index: int, _topic_id: Any) -> Any:
        partition = self._topic_partition((topic, index))
        if partition is None or partition.log is None:
            raise KafkaError(f"no open log for {topic}-{index}")
        if not hasattr(partition.log, "update_high_watermark"):
            # A log without the replication calls (a test's in-memory stand-in): one copy, unreplicated.
            raise KafkaError(f"the log of {topic}-{index} cannot be replicated")
        return partition.log

    def _appender(self, key: tuple[str, int]):
        manager = self.manager
        clock = self.service._clock_ms  # noqa: SLF001

        def append(batches: list, **kwargs: Any) -> Any:
            # Coordinator and marker appends (their own waits decide when they are committed).
            result = manager.append(key, batches, clock(), required_acks=1, **kwargs)
            self.service.wake()
            return result

        return append

    def _high_watermark_moved(self, key: tuple[str, int], _hw: int) -> None:
        partition = self._topic_partition(key)
        if partition is not None:
            partition.notify_new_data()
            partition.advance_high_watermark()

    def _leadership_changed(self, key: tuple[str, int], replica: Any) -> None:
        self.coordinators.leadership_changed(key[0], key[1], replica.is_leader, replica.leader_epoch)

    def _leaderships(self, topic: str) -> dict[int, int]:
        """{partition: leader epoch} of the partitions of ``topic`` this broker leads now."""
        return {
            index: replica.leader_epoch
            for (name, index), replica in self.manager.partitions.items()
            if name == topic and replica.is_leader
        }

    async def _send_to_broker(self, broker_id: int, api_key: int, version: int, request: Any) -> Any:
        broker = self.node.metadata.image.broker(broker_id)
        endpoint = None if broker is None else broker.endpoint(self.listener)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} has no {self.listener} listener")
        return await self.node.peers.send((endpoint.host, endpoint.port), api_key, version, request)
