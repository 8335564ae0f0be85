"""The async driver of a consumer-protocol group (KIP-848, ``group_protocol="consumer"``).

It sends the heartbeats :class:`~onceflow.client.consumer.kip848.membership.ConsumerMembership`
builds, one at a time, and runs its reconciliations inside the consumer's poll (as Kafka's consumer
does), so ``on_revoke``/``on_assign`` run where the user processes records. The heartbeat task
answers the coordinator at the interval it asks for, and at once after a reconciliation, whose new
owned partitions are the acknowledgement the coordinator waits for before it hands the partitions
on. Joining (heartbeats at epoch 0 until the coordinator answers) runs in a task that poll starts and
does not wait for, so poll stays within its timeout while the coordinator is away; the task ends once
the member is in the group, and the next poll reconciles. Topic ids in assignments are named through
Metadata.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import BrokerConnectionError
from onceflow.client.consumer.actions import Action
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.coordinator import GroupCoordinatorBase, capped_version, remaining
from onceflow.client.consumer.kip848.membership import ConsumerMembership
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import ErrorCode, KafkaError, UnsupportedVersion
from onceflow.protocol.messages import ConsumerGroupHeartbeatRequest

log = logging.getLogger(__name__)

_HEARTBEAT_MAX_VERSION = 1


class ConsumerGroupCoordinator(GroupCoordinatorBase):
    def __init__(
        self,
        config: ConsumerConfig,
        client: AsyncClient,
        membership: ConsumerMembership,
        *,
        topics: Callable[[], list[str]],
        pattern: Callable[[], str | None] = lambda: None,
        on_assign: Callable[[list[TopicPartition]], Awaitable[None]],
        on_revoke: Callable[[list[TopicPartition]], Awaitable[None]],
        on_lost: Callable[[list[TopicPartition]], Awaitable[None]],
        on_assignment: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config, client, membership)
        self.membership: ConsumerMembership = membership
        self._topics = topics
        self._pattern = pattern
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_lost = on_lost
        self._on_assignment = on_assignment  # each reconciliation completed
        # One heartbeat in flight at a time: each answer must be applied to the state it was built from.
        self._heartbeat_lock = asyncio.Lock()
        self._heartbeat_now = asyncio.Event()
        self._heartbeat_task: asyncio.Task | None = None
        self._joining: asyncio.Task | None = None  # heartbeats at epoch 0 until in the group
        self._stop_joining = asyncio.Event()

    # -- commits ---------------------------------------------------------------------------------

    def _commit_identity(self) -> tuple[int, str, str | None]:
        m = self.membership
        if not m.active:
            return -1, "", None
        return m.member_epoch, m.member_id, m.group_instance_id

    async def _refresh_member_epoch(self, deadline: float) -> bool:
        await self._heartbeat(deadline)
        return self.membership.active

    # -- poll's part: join, report lost partitions, reconcile ------------------------------------

    async def ensure_active(self, deadline: float) -> None:
        m = self.membership
        if m.fatal is not None:
            raise m.fatal
        self.rejoin_event.clear()
        if m.lost:
            await self._on_lost(m.lose_partitions())
        if not m.joined:
            self._start_heartbeats()  # it waits for the join, then keeps the member in between polls
            if self._joining is None or self._joining.done():
                self._stop_joining.clear()
                self._joining = asyncio.get_running_loop().create_task(self._join())
                self._joining.add_done_callback(lambda _task: self.rejoin_event.set())
            return  # poll carries on; the task wakes it when the member is in (or failed for good)
        if m.subscription_changed:  # the heartbeat task tells the coordinator at once
            m.subscription_changed = False
            self._heartbeat_now.set()
        await self._reconcile()
        self._start_heartbeats()

    async def _join(self) -> None:
        """Heartbeat at epoch 0 until the coordinator takes the member in, backing off between
        attempts; stops on a fatal answer, on partitions to report lost (poll does), or when leaving."""
        m = self.membership
        backoff = self.config.retry_backoff_ms / 1000
        while not (m.joined or m.fatal is not None or m.lost or self._closed or self._stop_joining.is_set()):
            # The coordinator is waited for one backoff at most, as long as a failed attempt waits
            # anyway: the first heartbeat goes out as soon as the lookup answers (~1 ms), not a whole
            # backoff after it, and leaving or closing still stops the join within a backoff.
            try:
                action = await self._heartbeat(time.monotonic() + backoff)
            except KafkaError as exc:  # e.g. no metadata to name an owned partition's topic id
                log.info("group %s: joining heartbeat failed (%s)", self.group_id, exc)
                action = Action.RETRY
            if action is not Action.NONE:
                try:
                    await asyncio.wait_for(self._stop_joining.wait(), backoff)
                except TimeoutError:
                    pass

    async def _stop_join(self) -> None:
        """Let the join task finish the heartbeat it has in flight (its answer may make us a member,
        whom the leave must then name), then stop it."""
        joining, self._joining = self._joining, None
        if joining is not None:
            self._stop_joining.set()
            await asyncio.gather(joining, return_exceptions=True)

    async def _reconcile(self) -> None:
        m = self.membership
        if m.unknown_topic_ids():
            await self._learn_topic_ids()
        step = m.reconciliation()
        if step is None:
            return
        log.info(
            "group %s: member %s at epoch %d revokes %s, assigns %s",
            self.group_id,
            m.member_id,
            m.member_epoch,
            step.revoke,
            step.assign,
        )
        if step.revoke:
            await self._on_revoke(step.revoke)
            m.revoked(step.revoke)
        if step.assign:
            await self._on_assign(step.assign)
            m.assigned(step.assign)
        # Kafka's signalReconciliationCompleting: once the callbacks ran (the consumer reschedules its
        # auto commit from now).
        self._on_assignment()
        self._heartbeat_now.set()  # the acknowledgement the coordinator waits for

    async def _learn_topic_ids(self) -> None:
        # A pattern's matches are the coordinator's to know: ask for every topic then.
        wanted = (
            None
            if self._pattern()
            else sorted(set(self._topics()) | {tp.topic for tp in self.membership.owned})
        )
        metadata = await self.client.metadata(wanted)
        self.membership.learn_topic_ids(
            {name: info.topic_id for name, info in metadata.topics.items() if info.topic_id is not None}
        )

    # -- heartbeats ------------------------------------------------------------------------------

    async def _heartbeat(self, deadline: float | None = None) -> Action:
        """Send one heartbeat (joining if not in the group) and apply its answer; the coordinator is
        looked for until ``deadline`` (default: the request timeout from now)."""
        m = self.membership
        if deadline is None:
            deadline = time.monotonic() + self.config.request_timeout_ms / 1000
        try:
            conn = await self.connection(deadline)
            version = capped_version(conn, ConsumerGroupHeartbeatRequest, _HEARTBEAT_MAX_VERSION)
        except UnsupportedVersion as exc:
            m.fatal = KafkaError(
                f"group {self.group_id!r}: the coordinator does not speak the consumer group protocol "
                f"(KIP-848): {exc}; use group_protocol='classic'",
                ErrorCode.UNSUPPORTED_VERSION,
            )
            self.rejoin_event.set()
            return Action.FATAL
        except KafkaError as exc:  # nothing was sent: the membership is as it was
            log.debug("group %s: no coordinator for the heartbeat (%s)", self.group_id, exc)
            return Action.RETRY
        async with self._heartbeat_lock:
            if m.owned and any(tp.topic not in m.topic_ids for tp in m.owned):
                await self._learn_topic_ids()
            try:
                request = m.heartbeat_request(self._topics(), version, self._pattern())
            except KafkaError as exc:  # what no retry mends, e.g. a pattern for a v0 coordinator
                m.fatal = exc
                self.rejoin_event.set()
                return Action.FATAL
            try:
                response = await conn.send(request, version=version)
            except (BrokerConnectionError, KafkaError) as exc:
                log.info("group %s: heartbeat failed (%s)", self.group_id, exc)
                if isinstance(exc, BrokerConnectionError):
                    self.coordinator_dead()
                m.on_heartbeat_failed()
                return Action.RETRY
            outcome = m.on_heartbeat_response(response)
        if outcome.action is Action.NONE:
            if m.reconciliation() is not None or m.unknown_topic_ids():
                self.rejoin_event.set()  # wake poll: there is an assignment to reconcile
            return Action.NONE
        log.info(
            "group %s: heartbeat answered %s%s -> %s",
            self.group_id,
            outcome.error.name,
            f" ({outcome.message})" if outcome.message else "",
            outcome.action.name,
        )
        if outcome.action is Action.REDISCOVER:
            self.coordinator_dead()
        self.rejoin_event.set()
        return outcome.action

    def _start_heartbeats(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        while not self._closed:
            interval_ms = m.heartbeat_interval_ms or self.config.heartbeat_interval_ms
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_ms / 1000)
            except TimeoutError:
                pass
            self._heartbeat_now.clear()
            if self._closed or not m.joined or m.fatal is not None:
                continue  # poll joins again, or raises the fatal error
            if await self._left_for_slow_poll():
                continue
            if await self._heartbeat() in (Action.RETRY, Action.REDISCOVER):
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- leaving ---------------------------------------------------------------------------------

    async def _leave(self) -> None:
        """Send the leaving heartbeat (epoch -1, or -2 for a static member) over the coordinator
        connection if there is one, and forget the epoch."""
        m = self.membership
        async with self._heartbeat_lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                try:
                    version = capped_version(conn, ConsumerGroupHeartbeatRequest, _HEARTBEAT_MAX_VERSION)
                    request = m.leave_request()
                    if request is not None:
                        await conn.send(request, version=version)
                except (BrokerConnectionError, KafkaError) as exc:
                    log.info("group %s: leaving heartbeat failed (%s)", self.group_id, exc)
            m.left()

    async def leave_group(self) -> None:
        await self._stop_join()
        self.membership.revoked(list(self.membership.owned))
        await self._leave()

    async def close(self, *, leave: bool = True, deadline: float | None = None) -> None:
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        try:
            async with asyncio.timeout(None if deadline is None else remaining(deadline)):
                await self._stop_join()
                if leave:
                    await self._leave()
        except TimeoutError:
            log.info("group %s: leaving did not finish before the close timeout", self.group_id)
        await self._close_connection()
