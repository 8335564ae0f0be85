"""An acks=all produce waiting for the ISR: Kafka's ``DelayedProduce``.

The batches are in the leader's log already; the answer waits until each partition's high watermark
has passed its last offset (every member of the maximal ISR has it), or the request's timeout. A
partition that stopped being led here meanwhile answers NOT_LEADER_OR_FOLLOWER (the producer sends
again to the new leader, which answers a copy it already has as a duplicate with its original
offset); one whose ISR fell below ``min.insync.replicas`` while the batch was replicated answers
NOT_ENOUGH_REPLICAS_AFTER_APPEND; one still waiting at the timeout answers REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from onceflow.broker.replica.partition import ReplicatedPartition
from onceflow.protocol.errors import ErrorCode

PartitionKey = tuple[str, int]


class PendingProduce:
    def __init__(self, required_offsets: Mapping[PartitionKey, int], deadline_ms: int) -> None:
        """``required_offsets``: per partition, the offset the high watermark must reach (the last
        appended offset + 1)."""
        self._waiting = dict(required_offsets)
        self.deadline_ms = deadline_ms
        self.errors: dict[PartitionKey, ErrorCode] = {}

    @property
    def done(self) -> bool:
        return not self._waiting

    def try_complete(
        self, partition_of: Callable[[PartitionKey], ReplicatedPartition | None], now_ms: int
    ) -> bool:
        """Settle what can be settled; True once every partition has its answer in ``errors``."""
        for key, offset in list(self._waiting.items()):
            partition = partition_of(key)
            if partition is None:
                finished, error = True, ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                finished, error = partition.check_enough_replicas(offset)
            if finished:
                self.errors[key] = error
                del self._waiting[key]
        if self._waiting and now_ms >= self.deadline_ms:
            for key in self._waiting:
                self.errors[key] = ErrorCode.REQUEST_TIMED_OUT
            self._waiting.clear()
        return not self._waiting
