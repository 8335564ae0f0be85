"""What both group protocols' async drivers share (:class:`GroupCoordinatorBase`): finding the
coordinator, and committing and fetching offsets under the member's identity. The drivers are
:mod:`.classic.driver` (JoinGroup/SyncGroup) and :mod:`.kip848.driver` (KIP-848).

Rebalances happen inside the consumer's ``poll`` (as in Kafka's consumers), so rebalance callbacks run
where the user processes records; heartbeat tasks only notice that a rejoin is needed. Poll is bounded
by its timeout, as Kafka's is: looking for the coordinator stops at poll's deadline (the lookup in
flight carries on and a later poll picks it up), and joining goes on in a task of its own that later
polls wait for; only the callbacks run inside poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest

from onceflow.client.async_client import AsyncClient
from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.offset_commit import (
    CommitErrorAction,
    CommitFailed,
    ConsumerTimeout,
    RebalanceInProgress,
    commit_error_action,
    first_commit_error,
)
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.find_coordinator import find_coordinator
from onceflow.protocol.errors import CoordinatorNotAvailable, ErrorCode, KafkaError

log = logging.getLogger(__name__)

OFFSET_COMMIT_MAX_VERSION = 9  # v10 names topics by id
_OFFSET_FETCH_MAX_VERSION = 7  # v8+ batches groups; v7 has require_stable (KIP-447)
_STALE_EPOCH_RETRIES = 3

__all__ = ["CommitFailed", "GroupCoordinatorBase", "capped_version"]


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


def remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


class GroupCoordinatorBase:
    """What both group protocols share: the connection to the group's coordinator, and committing and
    fetching offsets under the member's identity. Subclasses run the membership itself.

    Every wait here has a deadline (``time.monotonic()``): poll's own, or for ``commit``/``committed``
    ``default.api.timeout.ms``. The coordinator is looked up by one attempt at a time, in a task that
    callers share and that outlives the caller whose deadline passed, so even ``poll(0)`` gets there."""

    def __init__(self, config: ConsumerConfig, client: AsyncClient, membership: Any) -> None:
        self.config = config
        self.client = client
        self.membership = membership
        self._conn: Connection | None = None
        self._lookup: asyncio.Task | None = None  # FindCoordinator + connect, one attempt
        self._next_lookup = 0.0  # no new attempt before this (retry.backoff.ms after a failure)
        self._lookup_error: BaseException | None = None
        self.rejoin_event = asyncio.Event()  # set when poll() has group work to do
        self.last_poll = time.monotonic()
        self._closed = False

    @property
    def group_id(self) -> str:
        return self.membership.group_id

    # -- the coordinator connection --------------------------------------------------------------

    async def connection(self, deadline: float) -> Connection:
        """The coordinator's connection, finding the coordinator first if needed; COORDINATOR_NOT_AVAILABLE
        (retriable) if none is found by ``deadline``. A non-retriable lookup error is raised."""
        while self._conn is None or self._conn.closed:
            lookup = self._lookup
            if lookup is None:
                if self._closed:  # no new connection once closing (it would outlive the close)
                    raise self._not_found()
                backoff = self._next_lookup - time.monotonic()
                if backoff > 0:
                    if time.monotonic() + backoff > deadline:
                        raise self._not_found()
                    await asyncio.sleep(backoff)
                    continue
                lookup = self._lookup = asyncio.get_running_loop().create_task(self._find_and_connect())
            if not lookup.done():
                await asyncio.wait({lookup}, timeout=remaining(deadline))  # never cancels the lookup
            if not lookup.done():
                raise self._not_found()
            if self._lookup is lookup:
                self._lookup = None
                self._take_lookup(lookup)
        return self._conn

    async def _find_and_connect(self) -> Connection:
        _node, host, port = await find_coordinator(await self.client.any_connection(), self.group_id)
        return await Connection.open(
            host,
            port,
            client_id=self.config.client_id,
            security=self.client.security,
            # JoinGroup may be held for the whole rebalance timeout.
            request_timeout_s=(self.config.request_timeout_ms + self.config.effective_rebalance_timeout_ms)
            / 1000,
        )

    def _take_lookup(self, lookup: asyncio.Task) -> None:
        if lookup.cancelled():
            error: BaseException = CoordinatorNotAvailable("the coordinator lookup was cancelled")
        else:
            error = lookup.exception()
            if error is None:
                if self._conn is not None:
                    asyncio.get_running_loop().create_task(self._conn.close())
                self._conn = lookup.result()
                self._lookup_error = None
                return
        if not isinstance(error, KafkaError) or not error.retriable:
            raise error
        if self._lookup_error is None:
            log.info("group %s: coordinator not available (%s); retrying", self.group_id, error)
        self._lookup_error = error
        self._next_lookup = time.monotonic() + self.config.retry_backoff_ms / 1000

    def _not_found(self) -> KafkaError:
        reason = f": {self._lookup_error}" if self._lookup_error is not None else ""
        return CoordinatorNotAvailable(f"group {self.group_id!r}: coordinator not found yet{reason}")

    def coordinator_dead(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            asyncio.get_running_loop().create_task(conn.close())

    async def _send(self, request, cap: int | None = None, *, deadline: float):
        conn = await self.connection(deadline)
        version = None if cap is None else capped_version(conn, type(request), cap)
        try:
            return await conn.send(request, version=version)
        except BrokerConnectionError:
            self.coordinator_dead()
            raise

    async def _close_connection(self) -> None:
        lookup, self._lookup = self._lookup, None
        if lookup is not None:
            lookup.cancel()
            found = (await asyncio.gather(lookup, return_exceptions=True))[0]
            if isinstance(found, Connection):
                await found.close()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str | None]], *, deadline: float) -> None:
        """Commit ``{tp: (offset, metadata)}`` under the member's identity, retrying what Kafka retries
        (:func:`~onceflow.client.consumer.offset_commit.commit_error_action`) until ``deadline``.
        Raises :class:`CommitFailed` (or :class:`RebalanceInProgress`) when the group has moved on,
        :class:`ConsumerTimeout` at the deadline, or the broker's error."""
        if not offsets:
            return
        topics = offset_commit_topics(offsets)
        stale_retries = 0
        while True:
            identity = self._commit_identity()
            generation, member_id, instance_id = identity
            request = OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                topics=topics,
            )
            try:
                response = await self._send(request, OFFSET_COMMIT_MAX_VERSION, deadline=deadline)
            except KafkaError as exc:  # no coordinator, the connection lost, or no answer in time
                if not exc.retriable:
                    raise
                failed, error = None, exc
                code = exc.code
            else:
                failed = first_commit_error(response)
                if failed is None:
                    return
                code = failed[2]
                error = None
            action = commit_error_action(code)
            where = f"{failed[0]}-{failed[1]} " if failed else ""
            if action in (CommitErrorAction.FIND_COORDINATOR, CommitErrorAction.RETRY):
                if action is CommitErrorAction.FIND_COORDINATOR:
                    self.coordinator_dead()
                backoff = self.config.retry_backoff_ms / 1000
                if time.monotonic() + backoff > deadline:
                    raise ConsumerTimeout(
                        f"commit of {where}to group {self.group_id!r} did not complete in time: "
                        f"{error or code.name}"
                    )
                await asyncio.sleep(backoff)
                continue
            if action is CommitErrorAction.REFRESH_EPOCH:
                # KIP-848: the coordinator bumped our epoch and its answer has not reached us yet.
                stale_retries += 1
                if stale_retries <= _STALE_EPOCH_RETRIES and await self._refresh_member_epoch(deadline):
                    continue
                action = CommitErrorAction.FENCED
            if action is CommitErrorAction.REJOIN:
                self._commit_fenced(code, identity)
                raise RebalanceInProgress(
                    f"commit of {where}to group {self.group_id!r} failed: the group is rebalancing; "
                    "poll again (which rejoins), then commit again",
                    code,
                )
            if action is CommitErrorAction.FENCED:
                self._commit_fenced(code, identity)
                raise CommitFailed(
                    f"commit to group {self.group_id!r} failed ({code.name}): the group rebalanced and "
                    f"{where or 'the partitions '}may be another member's now; poll again and "
                    "reprocess from the committed offset",
                    code,
                )
            raise KafkaError(f"commit of {where}to group {self.group_id!r} failed: {code.name}", code)

    async def fetch_committed(
        self, partitions: list[TopicPartition], *, deadline: float, require_stable: bool = True
    ) -> dict[TopicPartition, tuple[int, str | None] | None]:
        """Committed ``(offset, metadata)`` per partition, None where nothing is committed.

        ``require_stable`` (KIP-447) makes the broker answer UNSTABLE_OFFSET_COMMIT while a
        transaction's offsets for the partition are pending; that and other retriable errors are
        retried until ``deadline``, then :class:`ConsumerTimeout`."""
        if not partitions:
            return {}
        request = OffsetFetchRequest(
            group_id=self.group_id, topics=offset_fetch_topics(partitions), require_stable=require_stable
        )
        while True:
            try:
                response = await self._send(request, _OFFSET_FETCH_MAX_VERSION, deadline=deadline)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                retry, error = exc.code, exc
            else:
                error = None
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
                if not retry.retriable:
                    raise KafkaError(
                        f"fetching committed offsets of group {self.group_id!r}: {retry.name}", retry
                    )
            if commit_error_action(retry) is CommitErrorAction.FIND_COORDINATOR:
                self.coordinator_dead()
            backoff = self.config.retry_backoff_ms / 1000
            if time.monotonic() + backoff > deadline:
                raise ConsumerTimeout(
                    f"committed offsets of group {self.group_id!r} not fetched in time: {error or retry.name}"
                )
            await asyncio.sleep(backoff)

    # -- what the protocols do differently ---------------------------------------------------------

    def _commit_identity(self) -> tuple[int, str, str | None]:
        """(generation or member epoch, member id, group instance id) for OffsetCommit."""
        raise NotImplementedError

    def _commit_fenced(self, code: ErrorCode, identity: tuple[int, str, str | None]) -> None:
        """A commit sent as ``identity`` was refused because the membership moved on: arrange for the
        next poll to act (unless the member has moved on itself since, e.g. rejoined)."""
        self.rejoin_event.set()

    async def _refresh_member_epoch(self, deadline: float) -> bool:
        """STALE_MEMBER_EPOCH answered a commit: learn the current epoch; True if worth retrying."""
        return False

    async def ensure_active(self, deadline: float) -> None:
        """Poll's part of group membership: start or carry on joining, and run the callbacks of what
        finished. Returns while a join is still in flight (it goes on in the background and sets
        ``rejoin_event`` when it ends); raises retriable errors when the coordinator is not found by
        ``deadline``."""
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
        Kafka's consumers do on unsubscribe; a join in flight is abandoned. The next ensure_active
        joins again."""
        raise NotImplementedError

    async def close(self, *, leave: bool = True, deadline: float | None = None) -> None:
        """Stop heartbeating and joining, leave (if ``leave``; only over a connection already open,
        as Kafka's consumers do, and no later than ``deadline``) and close the connection."""
        raise NotImplementedError
