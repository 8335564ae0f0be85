"""Transaction markers across brokers (Kafka's ``TransactionMarkerChannelManager``, simplified).

A transaction coordinator writes its COMMIT/ABORT markers to every partition of the transaction.
On a cluster, some of them are led by other brokers: those get a WriteTxnMarkers request on the
inter-broker listener of their leader (as the metadata image names it); the coordinator's own
partitions are written locally, as on a single broker. Any partition that fails (no leader right
now, a connection lost) fails the whole call, and the coordinator writes the markers again later:
partitions accept a marker again for a producer with no open transaction.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import defaultdict
from typing import Any

from kafka.protocol.producer import WriteTxnMarkersRequest

from onceflow.broker import faults as fault_points
from onceflow.broker.txn.markers import TxnMarker
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27


class ClusterMarkerWriter:
    def __init__(
        self, local: Any, metadata: Any, node_id: int, listener: str, peers: Any, faults: Any = None
    ) -> None:
        self.local = local  # the broker's own writer (txn.service.LocalMarkerWriter)
        self.metadata = metadata
        self.node_id = node_id
        self.listener = listener
        self.peers = peers
        self.faults = faults

    async def write_markers(self, marker: TxnMarker) -> None:
        image = self.metadata.image
        local: set = set()
        remote: dict[int, set] = defaultdict(set)
        for topic, partition in marker.partitions:
            registration = image.partition(topic, partition)
            if registration is None or registration.leader == self.node_id:
                local.add((topic, partition))  # a deleted partition is skipped locally
            elif registration.leader < 0:
                raise KafkaError(
                    f"{topic}-{partition} has no leader right now", ErrorCode.NOT_LEADER_OR_FOLLOWER
                )
            else:
                remote[registration.leader].add((topic, partition))
        if not local and self.faults is not None and self.faults.fire(fault_points.CRASH_AFTER_PREPARE):
            # As the local writer's fault point (which fires when some partition is ours).
            log.error("fault crash-after-prepare: exiting before the markers of %r", marker.transactional_id)
            logging.shutdown()
            os._exit(1)
        jobs = [self._send(leader, marker, parts) for leader, parts in remote.items()]
        if local:
            jobs.append(self.local.write_markers(_with_partitions(marker, frozenset(local))))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise (
                    result
                    if isinstance(result, KafkaError)
                    else KafkaError(
                        f"markers of {marker.transactional_id!r}: {result}",
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    )
                )

    async def _send(self, leader: int, marker: TxnMarker, partitions: set) -> None:
        endpoint = self.metadata.image.broker(leader)
        endpoint = None if endpoint is None else endpoint.endpoint(self.listener)
        if endpoint is None:
            raise KafkaError(
                f"broker {leader} has no {self.listener} listener", ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
        r = WriteTxnMarkersRequest
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in sorted(partitions):
            by_topic[topic].append(partition)
        request = r(
            markers=[
                r.WritableTxnMarker(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.commit,
                    topics=[
                        r.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=indexes)
                        for topic, indexes in by_topic.items()
                    ],
                    coordinator_epoch=marker.coordinator_epoch,
                    transaction_version=marker.transaction_version,
                )
            ]
        )
        try:
            response = await self.peers.send((endpoint.host, endpoint.port), WRITE_TXN_MARKERS, 2, request)
        except ConnectionError as exc:
            raise KafkaError(f"broker {leader}: {exc}", ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        for written in response.markers:
            for topic in written.topics:
                for p in topic.partitions:
                    if p.error_code not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        raise KafkaError(
                            f"marker to {topic.name}-{p.partition_index} on broker {leader}",
                            ErrorCode(p.error_code),
                        )


def _with_partitions(marker: TxnMarker, partitions: frozenset) -> TxnMarker:
    return TxnMarker(
        marker.transactional_id,
        marker.producer_id,
        marker.producer_epoch,
        marker.coordinator_epoch,
        marker.commit,
        partitions,
        marker.transaction_version,
    )
