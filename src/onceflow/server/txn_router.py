"""Which broker coordinates a transactional id, and asking it from a partition leader.

A transactional id's coordinator is the leader of its ``__transaction_state`` partition. A produce of
transaction protocol v2 (Produce v12+) adds its partitions to the transaction before appending; when
the coordinator is another broker, the partition leader asks it with AddPartitionsToTxn (v5, the
brokers' batched form, ``verify_only`` false), as Kafka's ``AddPartitionsToTxnManager`` does.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest

from onceflow.broker.coordinator.partitioning import partition_for_key
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.internal_topics import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN = 24


class TransactionRouter:
    def __init__(self, metadata: Any, node_id: int, listener: str, peers: Any) -> None:
        self.metadata = metadata
        self.node_id = node_id
        self.listener = listener
        self.peers = peers

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker leading the id's ``__transaction_state`` partition (-1: none right now)."""
        topic = self.metadata.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return -1
        registration = topic.partitions.get(partition_for_key(transactional_id, len(topic.partitions)))
        return -1 if registration is None else registration.leader

    def is_local(self, transactional_id: str) -> bool:
        return self.coordinator_of(transactional_id) in (self.node_id, -1)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        *,
        verify_only: bool = False,
    ) -> dict[tuple[str, int], ErrorCode]:
        """Add ``partitions`` to the transaction on its coordinator (or, ``verify_only``, check that they
        are in it); each partition's answer."""
        coordinator = self.coordinator_of(transactional_id)
        broker = self.metadata.image.broker(coordinator)
        endpoint = None if broker is None else broker.endpoint(self.listener)
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append(partition)
        r = AddPartitionsToTxnRequest
        request = r(
            transactions=[
                r.AddPartitionsToTxnTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=verify_only,
                    topics=[r.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                )
            ]
        )
        try:
            response = await self.peers.send(
                (endpoint.host, endpoint.port), ADD_PARTITIONS_TO_TXN, 5, request
            )
        except ConnectionError as exc:
            log.info("transaction coordinator %d unreachable: %s", coordinator, exc)
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if response.error_code:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        codes = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    codes[(topic.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}
