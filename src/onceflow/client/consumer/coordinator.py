"""The async drivers of group membership. :class:`GroupCoordinatorBase` finds the coordinator and
commits and fetches offsets under the member's identity; :class:`GroupCoordinator` runs the classic
protocol's JoinGroup/SyncGroup through the sans-IO :class:`~onceflow.client.consumer.group.GroupMembership`
and heartbeats in the background (the consumer protocol's driver is in :mod:`.consumer_protocol`).

Rebalances happen inside the consumer's ``poll`` (as in Kafka's consumers), so rebalance callbacks run
where the user processes records; the heartbeat task only notices that a rejoin is needed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.consumer.assignors import TopicPartition
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.group import Action, GroupMembership, MemberState
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OFFSET_COMMIT_MAX_VERSION = 9  # v10 names topics by id
_OFFSET_FETCH_MAX_VERSION = 7  # v8+ batches groups; v7 has require_stable (KIP-447)
_GROUP_KEY_TYPE = 0
_STALE_EPOCH_RETRIES = 3
# The membership moved on: the partitions may be another member's now.
_COMMIT_FENCED_ERRORS = frozenset(
    {
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.STALE_MEMBER_EPOCH,
    }
)


class CommitFailed(KafkaError):
    """The commit cannot succeed: the group rebalanced and these partitions may belong to another
    member now. Poll again (which rejoins) and reprocess from the committed offsets."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


Callback = Callable[[list[TopicPartition]], Any]


async def _call(callback: Callback | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result


def capped_version(conn: Connection, request_cls, cap: int) -> int:
    return min(conn.version_for(request_cls), cap)


def offset_commit_topics(offsets: Mapping[TopicPartition, tuple[int, str | None]]) -> list:
    """OffsetCommit's topics for ``{tp: (offset, metadata)}`` (the consumer's commits and the admin's)."""
    by_topic: dict[str, list] = {}
    for tp, (offset, metadata) in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata or ""
            )
        )
    return [OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]


def offset_fetch_topics(
    partitions: Iterable[TopicPartition], topic_type=OffsetFetchRequest.OffsetFetchRequestTopic
) -> list:
    """OffsetFetch's topics naming ``partitions`` (v8+ groups take
    ``OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics``)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [topic_type(name=t, partition_indexes=ps) for t, ps in by_topic.items()]


async def find_coordinator(
    client: AsyncClient, key: str, key_type: int = _GROUP_KEY_TYPE
) -> tuple[int, str, int]:
    """``(node_id, host, port)`` of the coordinator for a group (key_type 0) or transactional id (1)."""
    conn = await client.any_connection()
    version = min(conn.version_for(FindCoordinatorRequest), 6)
    if version >= 4:
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    else:
        request = FindCoordinatorRequest(key=key, key_type=key_type)
    response = await conn.send(request, version=version)
    if version >= 4:
        entry = response.coordinators[0]
        code, node, host, port, message = (
            entry.error_code,
            entry.node_id,
            entry.host,
            entry.port,
            entry.error_message,
        )
    else:
        code, node, host, port = response.error_code, response.node_id, response.host, response.port
        message = getattr(response, "error_message", None)
    if code != ErrorCode.NONE:
        raise KafkaError(
            f"FindCoordinator for {key!r}: {ErrorCode(code).name} {message or ''}".strip(), ErrorCode(code)
        )
    return node, host, port


class GroupCoordinatorBase:
    """What both group protocols share: the connection to the group's coordinator, and committing and
    fetching offsets under the member's identity. Subclasses run the membership itself."""

    def __init__(self, config: ConsumerConfig, client: AsyncClient, membership: Any) -> None:
        self.config = config
        self.client = client
        self.membership = membership
        self._conn: Connection | None = None
        self.rejoin_event = asyncio.Event()  # set when poll() has group work to do
        self.last_poll = time.monotonic()
        self._closed = False

    @property
    def group_id(self) -> str:
        return self.membership.group_id

    # -- the coordinator connection --------------------------------------------------------------

    async def connection(self) -> Connection:
        while self._conn is None or self._conn.closed:
            try:
                _node, host, port = await find_coordinator(self.client, self.group_id)
                self._conn = await Connection.open(
                    host,
                    port,
                    client_id=self.config.client_id,
                    # JoinGroup may be held for the whole rebalance timeout.
                    request_timeout_s=(
                        self.config.request_timeout_ms + self.config.effective_rebalance_timeout_ms
                    )
                    / 1000,
                )
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.info("group %s: coordinator not available (%s); retrying", self.group_id, exc)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        return self._conn

    def coordinator_dead(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            asyncio.get_running_loop().create_task(conn.close())

    async def _send(self, request, cap: int | None = None):
        conn = await self.connection()
        version = None if cap is None else capped_version(conn, type(request), cap)
        try:
            return await conn.send(request, version=version)
        except BrokerConnectionError:
            self.coordinator_dead()
            raise

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str | None]]) -> None:
        """Commit ``{tp: (offset, metadata)}`` under the member's identity; raises :class:`CommitFailed`
        when the group has moved on, or the broker's error."""
        if not offsets:
            return
        topics = offset_commit_topics(offsets)
        for attempt in range(_STALE_EPOCH_RETRIES + 1):
            generation, member_id, instance_id = self._commit_identity()
            request = OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                topics=topics,
            )
            response = await self._send(request, OFFSET_COMMIT_MAX_VERSION)
            failed = [
                (topic.name, p.partition_index, ErrorCode(p.error_code))
                for topic in response.topics
                for p in topic.partitions
                if p.error_code != ErrorCode.NONE
            ]
            if not failed:
                return
            stale = all(code == ErrorCode.STALE_MEMBER_EPOCH for _t, _p, code in failed)
            # KIP-848: the coordinator bumped our epoch and its answer has not reached us yet.
            if not (stale and attempt < _STALE_EPOCH_RETRIES and await self._refresh_member_epoch()):
                break
        topic, partition, code = failed[0]
        if code in _COMMIT_FENCED_ERRORS:
            self._commit_fenced()
            raise CommitFailed(
                f"commit to group {self.group_id!r} failed ({code.name}): the group rebalanced and "
                f"{topic}-{partition} may be another member's now; poll again and "
                "reprocess from the committed offset",
                code,
            )
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.coordinator_dead()
        raise KafkaError(
            f"commit of {topic}-{partition} to group {self.group_id!r} failed: {code.name}", code
        )

    async def fetch_committed(
        self, partitions: list[TopicPartition], *, require_stable: bool = True
    ) -> dict[TopicPartition, tuple[int, str | None] | None]:
        """Committed ``(offset, metadata)`` per partition, None where nothing is committed.

        ``require_stable`` (KIP-447) makes the broker answer UNSTABLE_OFFSET_COMMIT while a
        transaction's offsets for the partition are pending; we retry until they settle."""
        if not partitions:
            return {}
        request = OffsetFetchRequest(
            group_id=self.group_id, topics=offset_fetch_topics(partitions), require_stable=require_stable
        )
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000
        while True:
            response = await self._send(request, _OFFSET_FETCH_MAX_VERSION)
            retry = ErrorCode(getattr(response, "error_code", 0) or 0)
            result: dict[TopicPartition, tuple[int, str | None] | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = ErrorCode(p.error_code)
                    if code != ErrorCode.NONE:
                        retry = code
                        continue
                    tp = TopicPartition(topic.name, p.partition_index)
                    result[tp] = (p.committed_offset, p.metadata) if p.committed_offset >= 0 else None
            if retry == ErrorCode.NONE:
                return result
            if not retry.retriable or time.monotonic() > deadline:
                raise KafkaError(
                    f"fetching committed offsets of group {self.group_id!r}: {retry.name}", retry
                )
            if retry in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self.coordinator_dead()
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- what the protocols do differently ---------------------------------------------------------

    def _commit_identity(self) -> tuple[int, str, str | None]:
        """(generation or member epoch, member id, group instance id) for OffsetCommit."""
        raise NotImplementedError

    def _commit_fenced(self) -> None:
        """A commit was refused because the membership moved on: arrange for the next poll to act."""
        self.rejoin_event.set()

    async def _refresh_member_epoch(self) -> bool:
        """STALE_MEMBER_EPOCH answered a commit: learn the current epoch; True if worth retrying."""
        return False

    async def ensure_active(self) -> None:
        raise NotImplementedError

    async def _leave(self) -> None:
        raise NotImplementedError

    async def _left_for_slow_poll(self) -> bool:
        """Kafka's max.poll.interval.ms: a member whose application stopped polling leaves the group,
        so its partitions move on; the next poll joins again. Returns whether it left."""
        if time.monotonic() - self.last_poll <= self.config.max_poll_interval_ms / 1000:
            return False
        log.warning(
            "group %s: poll() not called within max.poll.interval.ms=%d; leaving the group so "
            "its partitions move on (the next poll rejoins)",
            self.group_id,
            self.config.max_poll_interval_ms,
        )
        await self._leave()
        self.rejoin_event.set()
        return True

    async def leave_group(self) -> None:
        """Give up every partition (the caller ran the revoke callback) and leave the group, as
        Kafka's consumers do on unsubscribe; the next ensure_active joins again."""
        raise NotImplementedError

    async def close(self, *, leave: bool = True) -> None:
        raise NotImplementedError


class GroupCoordinator(GroupCoordinatorBase):
    """The classic protocol: JoinGroup/SyncGroup through :class:`GroupMembership` (the leader
    assigns), heartbeats in the background, LeaveGroup."""

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
    ) -> None:
        super().__init__(config, client, membership)
        self._topics = topics
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_lost = on_lost
        self._heartbeat_task: asyncio.Task | None = None
        self._fatal: KafkaError | None = None

    def _commit_identity(self) -> tuple[int, str, str | None]:
        m = self.membership
        if m.state != MemberState.STABLE:
            return -1, "", None
        return m.generation_id, m.member_id, m.group_instance_id

    def _commit_fenced(self) -> None:
        self.membership.rejoin_needed = True
        super()._commit_fenced()

    # -- joining ---------------------------------------------------------------------------------

    @property
    def needs_rejoin(self) -> bool:
        m = self.membership
        return m.rejoin_needed or m.state != MemberState.STABLE

    async def ensure_active(self) -> None:
        """Join (or rejoin) until the member is stable with an assignment; runs callbacks."""
        if self._fatal is not None:
            raise self._fatal
        self.last_poll = time.monotonic()
        while self.needs_rejoin:
            self.rejoin_event.clear()
            await self._join_once()
        self._start_heartbeats()

    async def _join_once(self) -> None:
        m = self.membership
        backoff = self.config.retry_backoff_ms / 1000
        if m.lost:
            lost = m.lose_partitions()
            if lost:
                await self._on_lost(lost)
            m.reset_member()
        if m.protocol_is_eager and m.owned:
            await self._on_revoke(m.revoke_all())
        try:
            response = await self._send(m.join_request(self._topics()))
        except (BrokerConnectionError, KafkaError) as exc:
            log.info("group %s: JoinGroup failed (%s); retrying", self.group_id, exc)
            m.abandon_round()
            await asyncio.sleep(backoff)
            return
        joined = m.on_join_response(response)
        if joined.action != Action.NONE:
            await self._act(joined.action, joined.error, "JoinGroup")
            return
        assignments = None
        if joined.is_leader:
            topics = sorted({t for s in joined.members.values() for t in s.topics})
            metadata = await self.client.metadata(topics)
            counts = {t: len(info.partitions) for t, info in metadata.topics.items() if info.partitions}
            assignments = m.compute_assignments(joined.members, counts)
            log.info(
                "group %s generation %d: leader assigned %d members",
                self.group_id,
                m.generation_id,
                len(assignments),
            )
        try:
            response = await self._send(m.sync_request(assignments))
        except (BrokerConnectionError, KafkaError) as exc:
            log.info("group %s: SyncGroup failed (%s); rejoining", self.group_id, exc)
            m.abandon_round()
            await asyncio.sleep(backoff)
            return
        synced = m.on_sync_response(response)
        if synced.action != Action.NONE:
            await self._act(synced.action, synced.error, "SyncGroup")
            return
        log.info(
            "group %s generation %d: member %s assigned %s",
            self.group_id,
            m.generation_id,
            m.member_id,
            synced.assigned,
        )
        if synced.revoked:
            await self._on_revoke(synced.revoked)
        await self._on_assign(synced.added)

    async def _act(self, action: Action, error: ErrorCode, what: str) -> None:
        log.info("group %s: %s answered %s -> %s", self.group_id, what, error.name, action.name)
        if action == Action.FATAL:
            raise KafkaError(f"group {self.group_id!r}: {what} failed with {error.name}", error)
        if action == Action.LOST:
            await self._on_lost(self.membership.lose_partitions())
            self.membership.reset_member()
        elif action == Action.REDISCOVER:
            self.coordinator_dead()
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        elif action == Action.RETRY:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        self.membership.rejoin_needed = True

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
            try:
                response = await self._send(m.heartbeat_request())
            except (BrokerConnectionError, KafkaError) as exc:
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
        """Send LeaveGroup (dynamic members only: a static member's slot waits for it to return)."""
        m = self.membership
        if m.member_id and m.group_instance_id is None:
            try:
                await self._send(m.leave_request())
            except (BrokerConnectionError, KafkaError) as exc:
                log.info("group %s: LeaveGroup failed (%s)", self.group_id, exc)
        m.mark_lost()

    async def leave_group(self) -> None:
        self.membership.revoke_all()
        await self._leave()

    async def close(self, *, leave: bool = True) -> None:
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        if leave and self.membership.member_id:
            await self._leave()
            self.membership.reset_member()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
