"""The async driver of a classic-protocol group (JoinGroup/SyncGroup, the leader assigns).

It runs the sans-IO :class:`~onceflow.client.consumer.classic.membership.GroupMembership`: poll starts a
JoinGroup/SyncGroup round in a task of its own (the coordinator may hold JoinGroup for the whole
rebalance timeout) and returns at its deadline if the round has not ended; a later poll runs the
round's callbacks. The round applies the answers to the membership as they come, so the member
heartbeats in its new generation at once, as Kafka's consumer does. Heartbeats run in the background.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from onceflow.client.async_client import AsyncClient
from onceflow.client.consumer.classic.membership import Action, GroupMembership, MemberState, SyncResult
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.coordinator import GroupCoordinatorBase, remaining
from onceflow.client.consumer.metadata_watch import partition_counts
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class GroupCoordinator(GroupCoordinatorBase):
    """The classic protocol: JoinGroup/SyncGroup through :class:`GroupMembership`, heartbeats,
    LeaveGroup."""

    def __init__(
        self,
        config: ConsumerConfig,
        client: AsyncClient,
        membership: GroupMembership,
        *,
        topics: Callable[[], list[str]],
        on_assign: Callable[[list[TopicPartition]], Awaitable[None]],
        on_revoke: Callable[[list[TopicPartition]], Awaitable[None]],
        on_lost: Callable[[list[TopicPartition]], Awaitable[None]],
        on_assignment: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config, client, membership)
        self._topics = topics
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_lost = on_lost
        self._on_assignment = on_assignment  # each round that ended with an assignment
        self._heartbeat_task: asyncio.Task | None = None
        self._round: asyncio.Task | None = None  # the JoinGroup/SyncGroup round in flight, or ended
        self._fatal: KafkaError | None = None

    def _commit_identity(self) -> tuple[int, str, str | None]:
        m = self.membership
        if m.state != MemberState.STABLE:
            return -1, "", None
        return m.generation_id, m.member_id, m.group_instance_id

    def _commit_fenced(self, code: ErrorCode, identity: tuple[int, str, str | None]) -> None:
        self.membership.on_commit_refused(code, identity[0], identity[1])
        super()._commit_fenced(code, identity)

    # -- joining ---------------------------------------------------------------------------------

    @property
    def needs_rejoin(self) -> bool:
        m = self.membership
        return m.rejoin_needed or m.state != MemberState.STABLE

    def check_metadata(self) -> bool:
        """The leader asks for a rejoin when the subscribed topics' partitions changed since it assigned
        (Kafka's "cached metadata has changed"); see :mod:`.metadata_watch`. Whether it asked now."""
        m = self.membership
        if not m.check_metadata():
            return False
        log.info(
            "group %s generation %d: the subscribed topics changed since the assignment (%s); rejoining",
            self.group_id,
            m.generation_id,
            m.metadata_watch.describe(),
        )
        return True

    async def ensure_active(self, deadline: float) -> None:
        if self._fatal is not None:
            raise self._fatal
        while True:
            joining = self._round
            if joining is not None:
                if not joining.done():
                    self.rejoin_event.clear()  # set again when the round ends
                    return
                self._round = None
                await self._end_round(joining.result())
                continue
            self.check_metadata()
            if not self.needs_rejoin:
                return
            self.rejoin_event.clear()
            await self._before_round()
            await self.connection(deadline)
            self._start_heartbeats()
            self._round = asyncio.get_running_loop().create_task(self._join_round())
            self._round.add_done_callback(lambda _task: self.rejoin_event.set())

    async def _before_round(self) -> None:
        """What the user hears before a JoinGroup: lost partitions, and with the eager protocol the
        revocation of everything."""
        m = self.membership
        if m.lost:
            lost = m.lose_partitions()
            if lost:
                await self._on_lost(lost)
            m.reset_member()
        if m.protocol_is_eager and m.owned:
            await self._on_revoke(m.revoke_all())

    async def _abandon_round(self, why: str, exc: KafkaError) -> None:
        """A round's request failed: drop the round and wait a retry backoff before the next one."""
        log.info("group %s: " + why, self.group_id, exc)
        self.membership.abandon_round()
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _join_round(self) -> SyncResult | tuple[Action, ErrorCode, str] | None:
        """One JoinGroup/SyncGroup round, in its own task: the new assignment, a failure for poll to
        handle (LOST, FATAL), or None when the round is to be started again."""
        m = self.membership
        try:
            try:
                # The round uses the connection poll found; if it is gone, the next round finds one.
                response = await self._send(m.join_request(self._topics()), deadline=time.monotonic())
            except KafkaError as exc:
                return await self._abandon_round("JoinGroup failed (%s); retrying", exc)
            joined = m.on_join_response(response)
            if joined.action != Action.NONE:
                return await self._round_failed(joined.action, joined.error, "JoinGroup")
            try:
                assignments = await self._assign(joined) if joined.is_leader else None
                response = await self._send(m.sync_request(assignments), deadline=time.monotonic())
            except KafkaError as exc:
                return await self._abandon_round("SyncGroup failed (%s); rejoining", exc)
            synced = m.on_sync_response(response)
            if synced.action != Action.NONE:
                return await self._round_failed(synced.action, synced.error, "SyncGroup")
            return synced
        except asyncio.CancelledError:  # closing or leaving: the member is about to leave anyway
            m.abandon_round()
            raise

    async def _assign(self, joined) -> dict[str, bytes]:
        """The leader's job: metadata for every member's topics, then the chosen assignor. The counts
        it assigned with are kept, to rejoin when they change (:mod:`.metadata_watch`)."""
        m = self.membership
        topics = sorted({t for s in joined.members.values() for t in s.topics})
        version = m.metadata_watch.next_version()
        metadata = await self.client.metadata(topics, auto_create=self.config.allow_auto_create_topics)
        counts = partition_counts(metadata, topics)
        assignments = m.compute_assignments(joined.members, counts)
        m.metadata_watch.assignment_made(version, counts)
        log.info(
            "group %s generation %d: leader assigned %d members",
            self.group_id,
            m.generation_id,
            len(assignments),
        )
        return assignments

    async def _round_failed(
        self, action: Action, error: ErrorCode, what: str
    ) -> tuple[Action, ErrorCode, str] | None:
        log.info("group %s: %s answered %s -> %s", self.group_id, what, error.name, action.name)
        self.membership.rejoin_needed = True
        if action == Action.REDISCOVER:
            self.coordinator_dead()
        if action in (Action.REDISCOVER, Action.RETRY):
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        if action in (Action.LOST, Action.FATAL):
            return action, error, what
        return None

    async def _end_round(self, outcome: SyncResult | tuple[Action, ErrorCode, str] | None) -> None:
        """Inside poll: the callbacks of a round that ended."""
        m = self.membership
        if outcome is None:
            return
        if isinstance(outcome, tuple):
            action, error, what = outcome
            if action == Action.FATAL:
                raise KafkaError(f"group {self.group_id!r}: {what} failed with {error.name}", error)
            await self._on_lost(m.lose_partitions())
            m.reset_member()
            return
        log.info(
            "group %s generation %d: member %s assigned %s",
            self.group_id,
            m.generation_id,
            m.member_id,
            outcome.assigned,
        )
        if outcome.revoked:
            await self._on_revoke(outcome.revoked)
        # Kafka's onJoinComplete: after the revocation, before onPartitionsAssigned, even when the
        # assignment did not change (the consumer reschedules its auto commit from now).
        self._on_assignment()
        await self._on_assign(outcome.added)

    async def _stop_round(self) -> None:
        """Abandon the round in flight (leaving or closing); an ended round's outcome is dropped."""
        joining, self._round = self._round, None
        if joining is not None:
            joining.cancel()
            await asyncio.gather(joining, return_exceptions=True)

    # -- heartbeats ------------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while not self._closed:
            await asyncio.sleep(interval)
            m = self.membership
            if m.state != MemberState.STABLE:
                continue
            if await self._left_for_slow_poll():
                continue
            try:  # no waiting for a coordinator: a lookup starts and the next beat uses it
                response = await self._send(m.heartbeat_request(), deadline=time.monotonic())
            except KafkaError as exc:
                log.info("group %s: heartbeat failed (%s)", self.group_id, exc)
                continue
            action = m.on_heartbeat_response(response)
            if action == Action.REDISCOVER:
                self.coordinator_dead()
            elif action == Action.FATAL:
                self._fatal = KafkaError(
                    f"group {self.group_id!r}: heartbeat failed with {ErrorCode(response.error_code).name}",
                    ErrorCode(response.error_code),
                )
                self.rejoin_event.set()
            elif action in (Action.REJOIN, Action.LOST):
                self.rejoin_event.set()

    # -- leaving ---------------------------------------------------------------------------------

    async def _leave(self) -> None:
        """Send LeaveGroup (dynamic members only: a static member's slot waits for it to return), over
        the coordinator connection if there is one (Kafka's consumers do not look for it to leave)."""
        m = self.membership
        request = m.leave_request() if m.member_id and m.group_instance_id is None else None
        m.mark_lost()  # before the answer, which a rejoin started meanwhile must not see applied
        if request is not None:
            try:
                await self._send(request, deadline=time.monotonic())
            except KafkaError as exc:
                log.info("group %s: LeaveGroup failed (%s)", self.group_id, exc)

    async def leave_group(self) -> None:
        await self._stop_round()
        self.membership.revoke_all()
        await self._leave()

    async def close(self, *, leave: bool = True, deadline: float | None = None) -> None:
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        await self._stop_round()
        if leave and self.membership.member_id:
            try:
                async with asyncio.timeout(None if deadline is None else remaining(deadline)):
                    await self._leave()
            except TimeoutError:
                log.info("group %s: no answer to LeaveGroup before the close timeout", self.group_id)
            self.membership.reset_member()
        await self._close_connection()
