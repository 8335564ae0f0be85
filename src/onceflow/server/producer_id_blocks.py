"""Producer ids on a cluster node: blocks handed out by the active controller (Kafka's
``RPCProducerIdManager``).

Every broker's idempotent producers and transaction coordinator need ids no other broker hands out.
The controller keeps the allocator in the metadata log (AllocateProducerIds: a block of 1,000 ids and
a ProducerIdsRecord moving the next block on), so blocks never overlap across brokers or failovers.
The broker takes its first block before it serves, asks for the next one when 90% of the current one
is used, and, should a block run out before the next arrives, answers COORDINATOR_LOAD_IN_PROGRESS (a
retriable error: the producer asks again) rather than wait inside a synchronous call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import AllocateProducerIdsRequest

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS = 67
PREFETCH_AT = 0.9  # share of a block used when the next one is asked for


class ControllerProducerIds:
    def __init__(self, channel, broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._next = 0
        self._end = 0  # exclusive end of the current block
        self._block_size = 0
        self._pending: tuple[int, int] | None = None  # the next block, fetched ahead
        self._fetching: asyncio.Task | None = None

    async def start(self) -> None:
        """Take the first block (before the broker serves)."""
        start, length = await self._allocate()
        self._next, self._end, self._block_size = start, start + length, length

    async def _allocate(self) -> tuple[int, int]:
        request = AllocateProducerIdsRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch())
        response = await self.channel.send(ALLOCATE_PRODUCER_IDS, 0, request)
        if response.error_code:
            raise KafkaError("the controller gave no producer ids", ErrorCode(response.error_code))
        log.info(
            "producer id block [%d, %d) for broker %d",
            response.producer_id_start,
            response.producer_id_start + response.producer_id_len,
            self.broker_id,
        )
        return response.producer_id_start, response.producer_id_len

    def _fetch_next(self) -> None:
        if self._pending is not None or (self._fetching is not None and not self._fetching.done()):
            return
        self._fetching = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            self._pending = await self._allocate()
        except Exception as exc:  # retried on the next id asked for
            log.warning("could not get a producer id block: %s", exc)

    def generate_producer_id(self) -> int:
        if self._next >= self._end:
            if self._pending is None:
                self._fetch_next()
                raise KafkaError(
                    "waiting for a block of producer ids from the controller",
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                )
            start, length = self._pending
            self._pending = None
            self._next, self._end, self._block_size = start, start + length, length
        producer_id = self._next
        self._next += 1
        if self._end - self._next <= self._block_size * (1 - PREFETCH_AT):
            self._fetch_next()
        return producer_id

    async def stop(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
