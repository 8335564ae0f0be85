"""The asyncio side of a broker's replication: it runs the ``ReplicaManager``'s timers, sends what the
manager asks for (fetcher requests to leaders on the inter-broker listener, AlterPartition to the
controller) and hands the answers back, and gives the request handlers awaitable produce and
follower-fetch calls. All the deciding is in the manager; this only moves messages and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.consumer import FetchResponse

from onceflow.broker.replica import wire
from onceflow.broker.replica.fetcher import (
    EpochRequestData,
    FetchRequestData,
    LeaderOffsetsRequestData,
)
from onceflow.broker.replica.manager import ReplicaManager, ToController, ToLeader
from onceflow.log.append_origin import AppendOrigin
from onceflow.log.log_append import AppendResult
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.records import BatchHeader

log = logging.getLogger(__name__)

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, ALTER_PARTITION = 1, 2, 23, 56
FETCH_VERSION, LIST_OFFSETS_VERSION, EPOCH_VERSION, ALTER_PARTITION_VERSION = 17, 8, 4, 3

# (broker id, api key, version, request) -> response; raises ConnectionError when it cannot be reached.
BrokerSend = Callable[[int, int, int, Any], Awaitable[Any]]
# (api key, version, request) -> the active controller's response.
ControllerSend = Callable[[int, int, Any], Awaitable[Any]]

_TopicResponse = FetchResponse.FetchableTopicResponse


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicationService:
    def __init__(
        self,
        manager: ReplicaManager,
        send_to_broker: BrokerSend,
        send_to_controller: ControllerSend,
        topic_ids: Callable[[], Mapping[str, uuid.UUID]],
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.manager = manager
        self._send_to_broker = send_to_broker
        self._send_to_controller = send_to_controller
        self._topic_ids = topic_ids
        self._clock_ms = clock_ms
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._sends: set[asyncio.Task] = set()
        self._next_checkpoint = 0
        self._stopped = False

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="replication")

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for send in list(self._sends):
            send.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        self.manager.checkpoint_high_watermarks()

    def wake(self) -> None:
        """Something happened (metadata, an answer): run the manager's timers and sends now."""
        self._wakeup.set()

    async def _run(self) -> None:
        interval = self.manager.config.replica_high_watermark_checkpoint_interval_ms
        while not self._stopped:
            self._wakeup.clear()
            now = self._clock_ms()
            try:
                for message in self.manager.poll(now):
                    self._spawn(self._deliver(message))
                if now >= self._next_checkpoint:
                    self._next_checkpoint = now + interval
                    self.manager.checkpoint_high_watermarks()
            except Exception:  # never let one bad step stop replication for good
                log.exception("replication step failed")
            deadline = min(self.manager.next_deadline_ms(now), self._next_checkpoint)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), max(deadline - self._clock_ms(), 1) / 1000)

    def _spawn(self, job: Awaitable[None]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    # -- what the manager sends -------------------------------------------------------------------

    async def _deliver(self, message: ToLeader | ToController) -> None:
        if isinstance(message, ToController):
            try:
                response = await self._send_to_controller(
                    ALTER_PARTITION, ALTER_PARTITION_VERSION, message.request
                )
            except Exception as exc:  # noqa: BLE001 - any failure means "send it again"
                log.info("AlterPartition failed: %s", exc)
                response = None
            self.manager.handle_alter_partition_response(message.proposals, response, self._clock_ms())
        else:
            answers = await self._ask_leader(message)
            self.manager.handle_fetcher_response(
                message.leader_id, message.request, answers, self._clock_ms()
            )
        self.wake()

    async def _ask_leader(self, message: ToLeader) -> Any:
        request = message.request
        leader = message.leader_id
        replica_id = self.manager.broker_id
        try:
            if isinstance(request, FetchRequestData):
                ids = self._topic_ids()
                response = await self._send_to_broker(
                    leader, FETCH, FETCH_VERSION, wire.fetch_request(request, ids)
                )
                if response.error_code:
                    log.info("fetch from broker %d failed: %s", leader, ErrorCode(response.error_code).name)
                    return None
                return wire.fetch_answers(response, {v: k for k, v in ids.items()})
            if isinstance(request, EpochRequestData):
                response = await self._send_to_broker(
                    leader, OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, wire.epoch_request(request, replica_id)
                )
                return wire.epoch_answers(response)
            if isinstance(request, LeaderOffsetsRequestData):
                earliest, latest = wire.leader_offsets_requests(request, replica_id)
                first = await self._send_to_broker(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, earliest)
                last = await self._send_to_broker(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, latest)
                return wire.leader_offsets_answers(first, last)
        except Exception as exc:  # noqa: BLE001 - a lost connection or a timeout: the fetcher backs off
            log.debug("request to broker %d failed: %s", leader, exc)
        return None

    # -- what the handlers call -------------------------------------------------------------------

    def append_now(
        self,
        key: tuple[str, int],
        batches: list[tuple[BatchHeader, memoryview]],
        *,
        required_acks: int,
        timeout_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> tuple[AppendResult, asyncio.Future[ErrorCode] | None]:
        """Append as leader now (errors before the write raise): the result, and for acks=all a future
        set once the ISR has the batches (NONE) or with the error that ended the wait. Synchronous, so
        that a handler appends before its first ``await`` and pipelined requests append in order."""
        done: asyncio.Future[ErrorCode] | None = None
        if required_acks == -1:
            done = asyncio.get_running_loop().create_future()

        def complete(_result: AppendResult, error: ErrorCode) -> None:
            if done is not None and not done.done():
                done.set_result(error)

        result = self.manager.append(
            key,
            batches,
            self._clock_ms(),
            required_acks=required_acks,
            timeout_ms=timeout_ms,
            origin=origin,
            on_complete=complete if done is not None else None,
        )
        self.wake()
        return result, done

    async def replicated(self, key: tuple[str, int], offset: int, timeout_ms: int) -> ErrorCode:
        """Wait until the ISR of ``key`` (led here) holds every offset up to ``offset`` (inclusive);
        NONE, or why not (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT)."""
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def complete(error: ErrorCode) -> None:
            if not done.done():
                done.set_result(error)

        self.manager.when_replicated(key, offset + 1, self._clock_ms(), timeout_ms, complete)
        self.wake()
        return await done

    async def fetch_for_follower(self, request: FetchRequestData) -> dict:
        """A follower's Fetch: the answers, once there is data or ``max_wait_ms`` passed."""
        done: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

        def reply(answers: dict) -> None:
            if not done.done():
                done.set_result(answers)

        self.manager.fetch_for_follower(request, self._clock_ms(), reply)
        self.wake()
        return await done
