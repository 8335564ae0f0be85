"""AsyncConsumer: Kafka's consumer on asyncio — assign or subscribe, poll, seek, commit.

Group work (rebalances, callbacks, auto commit) happens inside ``getmany``/``poll``, as in Kafka's
consumers, so a user's records and callbacks never interleave unexpectedly; heartbeats run in the
background. Poll keeps to its timeout: a coordinator that cannot be found or a join still in flight
make it return no records at its deadline, and the next poll carries on. Records come back as lists
per partition (``getmany``), or flattened with their topic and partition (``poll``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import add, attrgetter
from typing import Any

from onceflow.client.arguments import check_duration, check_int, check_str
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AsyncClient
from onceflow.client.connection import BrokerConnectionError
from onceflow.client.consumer.classic.assignors import assignors_for
from onceflow.client.consumer.classic.driver import GroupCoordinator
from onceflow.client.consumer.classic.membership import GroupMembership
from onceflow.client.consumer.config import CONSUMER, ConsumerConfig
from onceflow.client.consumer.coordinator import GroupCoordinatorBase
from onceflow.client.consumer.fetcher import Fetcher
from onceflow.client.consumer.kip848.driver import ConsumerGroupCoordinator
from onceflow.client.consumer.kip848.membership import ConsumerMembership
from onceflow.client.consumer.metadata_watch import partition_counts
from onceflow.client.consumer.metrics import ConsumerMetrics, timed
from onceflow.client.consumer.offset_commit import CommitFailed, RebalanceInProgress
from onceflow.client.consumer.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)
from onceflow.client.consumer.subscription_state import AUTO_TOPICS, SubscriptionState
from onceflow.client.metrics import MetricsSnapshot
from onceflow.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

_RECORD_FIELDS = attrgetter("offset", "timestamp", "key", "value", "headers")
_CLOSE_TIMEOUT_MS = 30000  # Kafka's KafkaConsumer.close() default
_new_tuple = tuple.__new__

Listener = Callable[[list[TopicPartition]], Any]


class NoOffsetForPartition(KafkaError):
    """No committed offset and ``auto.offset.reset=none``: the user must seek()."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


def _settings(config: ConsumerConfig | dict | None, overrides: dict) -> ConsumerConfig:
    if isinstance(config, ConsumerConfig):
        if overrides:
            raise TypeError("pass either a ConsumerConfig or keyword settings, not both")
        return config
    return ConsumerConfig.from_settings(config or {}, overrides)


def _topic_partition(tp: TopicPartition | tuple[str, int]) -> TopicPartition:
    if type(tp) is TopicPartition and type(tp.partition) is int:
        return tp
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise TypeError(
            f"a partition must be a TopicPartition or a (topic, partition) pair, not {tp!r}"
        ) from None
    return TopicPartition(check_str(topic, "topic"), check_int(partition, "partition", minimum=0))


async def _call(callback: Listener | None, partitions: list[TopicPartition]) -> None:
    if callback is not None:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result


class AsyncConsumer:
    """``AsyncConsumer("orders", bootstrap_servers=..., group_id="g")``; settings are Kafka's names
    in snake case, or a dict of dotted names via ``config=``."""

    def __init__(
        self,
        *topics: str,
        config: ConsumerConfig | dict | None = None,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        on_lost: Listener | None = None,
        **settings: Any,
    ) -> None:
        self.config = _settings(config, settings)
        self._client = AsyncClient(
            self.config.bootstrap_servers,
            client_id=self.config.client_id,
            request_timeout_s=self.config.request_timeout_ms / 1000,
            security=self.config.security,
        )
        self._subscriptions = SubscriptionState(self.config.auto_offset_reset)
        self._metrics = ConsumerMetrics(self.config.client_id)
        self._listeners = (on_assign, on_revoke, on_lost)
        self._fetcher: Fetcher | None = None
        self._coordinator: GroupCoordinatorBase | None = None
        self._membership: GroupMembership | ConsumerMembership | None = None
        if self.config.group_id is not None and self.config.group_protocol == CONSUMER:
            self._membership = ConsumerMembership(
                self.config.group_id,
                group_instance_id=self.config.group_instance_id,
                rebalance_timeout_ms=self.config.effective_rebalance_timeout_ms,
                server_assignor=self.config.group_remote_assignor,
            )
        elif self.config.group_id is not None:
            self._membership = GroupMembership(
                self.config.group_id,
                assignors_for(self.config.partition_assignment_strategy),
                group_instance_id=self.config.group_instance_id,
                session_timeout_ms=self.config.session_timeout_ms,
                rebalance_timeout_ms=self.config.effective_rebalance_timeout_ms,
            )
        self._next_auto_commit = 0.0
        self._next_pattern_match = 0.0  # classic protocol: when to match the pattern against metadata again
        self._metadata_topics: frozenset[str] | None = None  # the subscription Metadata was asked for
        # Classic protocol: the subscribed topics' metadata is refreshed every metadata.max.age.ms, in a
        # task of its own, for the leader's check that their partitions did not change (metadata_watch).
        self._next_metadata_refresh = 0.0
        self._metadata_refresh: asyncio.Task | None = None
        self._poll_deadline = 0.0  # the running poll's: rebalance callbacks (and their commits) run in poll
        self._leaving: asyncio.Task | None = None  # unsubscribe's commit, callback and leave
        self._listener_error: BaseException | None = None
        self._last_committed: dict[TopicPartition, int] = {}
        self._started = False
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Get ready to poll; needs a running event loop. As Kafka's consumer, it needs no broker yet:
        a consumer made while the cluster is down polls nothing until a bootstrap server answers."""
        if self._started:
            return
        try:
            await self._client.any_connection()
        except BrokerConnectionError as exc:
            log.warning("no bootstrap server answers yet (%s); polls will keep trying", exc)
        self._fetcher = Fetcher(self.config, self._client, self._subscriptions, self._metrics)
        if self._membership is not None:
            callbacks = dict(
                on_assign=self._partitions_assigned,
                on_revoke=self._partitions_revoked,
                on_lost=self._partitions_lost,
                on_assignment=self._reschedule_auto_commit,
            )
            topics = lambda: sorted(self._subscriptions.topics)  # noqa: E731
            if isinstance(self._membership, ConsumerMembership):
                self._coordinator = ConsumerGroupCoordinator(
                    self.config,
                    self._client,
                    self._membership,
                    topics=topics,
                    pattern=self._pattern,
                    **callbacks,
                )
            else:
                self._coordinator = GroupCoordinator(
                    self.config, self._client, self._membership, topics=topics, **callbacks
                )
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        self._started = True

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self, *, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (with enable.auto.commit), revoke, leave the group and close connections. The commit
        and the leave give up after ``timeout_ms`` (30 s, Kafka's default) when the coordinator does
        not answer; the revoke callback is not timed."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + (_CLOSE_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000
        refresh, self._metadata_refresh = self._metadata_refresh, None
        if refresh is not None:
            refresh.cancel()
            await asyncio.gather(refresh, return_exceptions=True)
        try:
            if not await self._finish_leaving(deadline):
                leaving, self._leaving = self._leaving, None
                leaving.cancel()
                await asyncio.gather(leaving, return_exceptions=True)
            if self._coordinator is not None:
                m = self._membership
                owned = self._subscriptions.assigned() if self._subscriptions.mode == AUTO_TOPICS else []
                if m is not None and m.active and owned:
                    if autocommit and self.config.enable_auto_commit:
                        await self._commit_quietly(deadline=deadline)
                    await _call(self._listeners[1], owned)
                await self._coordinator.close(deadline=deadline)
        finally:
            if self._fetcher is not None:
                await self._fetcher.close()
            await self._client.close()

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        on_lost: Listener | None = None,
    ) -> None:
        """Join the group for ``topics``, or for every topic whose whole name matches ``pattern`` (a
        regular expression; internal topics excluded); partitions arrive at the next poll (needs
        ``group_id``).

        With the classic protocol the consumer matches the pattern against the cluster's topics at
        the first poll and every ``metadata.max.age.ms``; with ``group_protocol="consumer"`` the
        coordinator matches it (KIP-848's SubscribedTopicRegex) and follows new topics itself."""
        if self._membership is None:
            raise KafkaError(
                "subscribe() needs a consumer group: set group.id in the consumer's config; "
                "use assign() to consume without a group"
            )
        topics = list(topics)
        if pattern is not None and topics:
            raise KafkaError("subscribe() takes topics or a pattern, not both")
        compiled = None
        if pattern is not None:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise KafkaError(
                    f"invalid subscription pattern {pattern!r}: {exc}", ErrorCode.INVALID_REGULAR_EXPRESSION
                ) from None
        elif not topics:
            self.unsubscribe()
            return
        if any(cb is not None for cb in (on_assign, on_revoke, on_lost)):
            self._listeners = (on_assign, on_revoke, on_lost)
        before = (self._subscriptions.topics, self._subscriptions.pattern)
        self._subscriptions.subscribe(topics, compiled)
        self._next_pattern_match = 0.0
        if (self._subscriptions.topics, self._subscriptions.pattern) != before:
            self._membership.request_rejoin()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group membership (commits still use group.id)."""
        wanted = [_topic_partition(tp) for tp in partitions]
        self._metrics.unassigned([tp for tp in self._subscriptions.assigned() if tp not in wanted])
        self._subscriptions.assign_from_user(wanted)
        if self._fetcher is not None:
            self._fetcher.clear_buffers()
            self._fetcher.wake()

    def unsubscribe(self) -> None:
        """Stop reading the subscription and leave the group, so its partitions move to the other
        members at once (Kafka's consumers do the same). The commit of the positions (with
        enable.auto.commit), the revoke callback and the leave run in the background; the next poll
        and close() wait for them. A member caught between generations (a rebalance in flight) reports
        its partitions lost instead, and commits nothing, as Kafka's consumers do."""
        m = self._membership
        leave = None
        if (
            self._coordinator is not None
            and m is not None
            and self._subscriptions.mode == AUTO_TOPICS
            and self._leaving is None  # else that leave is still under way, and no poll joined since
        ):
            owned = self._subscriptions.assigned()
            in_generation = m.active
            positions = (
                self._current_positions(owned) if in_generation and self.config.enable_auto_commit else {}
            )
            leave = self._leave_group(owned, positions, lost=not in_generation)
        self._subscriptions.unsubscribe()
        self._metadata_topics = None
        if self._metadata_refresh is not None:
            self._metadata_refresh.cancel()
            self._metadata_refresh = None
        if self._fetcher is not None:
            self._fetcher.clear_buffers()
        if m is not None:
            m.request_rejoin()
        if leave is not None:
            self._leaving = asyncio.get_running_loop().create_task(leave)

    async def _leave_group(self, owned: list[TopicPartition], positions: dict, *, lost: bool) -> None:
        if positions:
            try:
                deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
                await self._commit_offsets(positions, deadline)
            except (KafkaError, OSError) as exc:
                log.warning("commit on unsubscribe failed: %s", exc)
        if owned:
            await (self._listener(2, owned, fallback=1) if lost else self._listener(1, owned))
        await self._coordinator.leave_group()

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assigned())

    def metrics(self) -> MetricsSnapshot:
        """The consumer's metrics now, with Kafka's names: ``{MetricName: value}``, e.g.
        ``consumer.metrics().value("records-consumed-total")``; see docs/client-metrics.md."""
        return self._metrics.snapshot()

    def subscription(self) -> set[str]:
        return set(self._subscriptions.topics)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member's identity for ``producer.send_offsets_to_transaction`` (KIP-447)."""
        m = self._membership
        if m is None:
            raise KafkaError("group_metadata() needs group.id in the consumer's config")
        return ConsumerGroupMetadata(m.group_id, m.generation_id, m.member_id, m.group_instance_id)

    # -- rebalance callbacks (run inside poll) ---------------------------------------------------

    async def _listener(
        self, index: int, partitions: list[TopicPartition], fallback: int | None = None
    ) -> None:
        """Run a user callback; its exception is raised from poll once the rebalance has finished
        (as Kafka does), so a failing callback cannot leave the member half-joined."""
        callback = self._listeners[index] or (self._listeners[fallback] if fallback is not None else None)
        try:
            await _call(callback, partitions)
        except Exception as exc:
            log.warning("rebalance callback failed: %r (raised from poll after the rebalance)", exc)
            if self._listener_error is None:
                self._listener_error = exc

    def _reschedule_auto_commit(self) -> None:
        """A new assignment (a classic round ended, a reconciliation completed): the next auto commit
        is due a whole auto.commit.interval.ms from now, as Kafka's consumers reset their timer then
        (ConsumerCoordinator.onJoinComplete, ConsumerMembershipManager.signalReconciliationCompleting)."""
        if self.config.enable_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000

    async def _partitions_assigned(self, added: list[TopicPartition]) -> None:
        self._subscriptions.add(added)
        await self._listener(0, added)

    async def _partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if revoked and self.config.enable_auto_commit:
            await self._commit_quietly(revoked, deadline=self._poll_deadline)
        await self._listener(1, revoked)
        self._subscriptions.remove(revoked)
        self._fetcher.clear_buffers(revoked)
        self._metrics.unassigned(revoked)

    async def _partitions_lost(self, lost: list[TopicPartition]) -> None:
        # No commit: another member may own them already. Kafka calls onPartitionsLost, which
        # defaults to onPartitionsRevoked.
        await self._listener(2, lost, fallback=1)
        self._subscriptions.remove(lost)
        self._fetcher.clear_buffers(lost)
        self._metrics.unassigned(lost)

    # -- polling ---------------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list]:
        """Records per partition, in offset order, waiting up to ``timeout_ms`` for some to arrive.

        Each record has ``offset``, ``timestamp``, ``key``, ``value`` and ``headers`` attributes (the
        record decoder's own objects, made in C: read them by name, not by position)."""
        if not self._started:
            await self.start()
        if self._closed:
            raise KafkaError("the consumer is closed")
        check_duration(timeout_ms, "timeout_ms")
        fetcher = self._fetcher
        limit = max_records or self.config.max_poll_records
        self._metrics.polled(time.monotonic())
        deadline = self._poll_deadline = time.monotonic() + timeout_ms / 1000
        if self._coordinator is not None:
            self._coordinator.last_poll = time.monotonic()  # max.poll.interval.ms counts from here
        while True:
            try:
                await self._prepare(deadline)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                # A broker restarting or a coordinator moving: poll carries on (Kafka's consumers never
                # raise these from poll); records already buffered are still handed out.
                log.info("poll: %s; retrying", exc)
                await asyncio.sleep(
                    min(self.config.retry_backoff_ms / 1000, max(deadline - time.monotonic(), 0))
                )
            if self._listener_error is not None:
                error, self._listener_error = self._listener_error, None
                raise error
            records = fetcher.drain(limit, {TopicPartition(*tp) for tp in partitions} if partitions else None)
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            await self._wait(remaining)

    async def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records with their topic and partition, in one flat list."""
        batches = await self.getmany(timeout_ms=timeout_ms, max_records=max_records)
        flat: list[ConsumerRecord] = []
        for tp, records in batches.items():
            # Built in C (no Python frame per record): (topic, partition) + the five fields.
            fields = map(add, repeat((tp.topic, tp.partition)), map(_RECORD_FIELDS, records))
            flat.extend(map(_new_tuple, repeat(ConsumerRecord), fields))
        return flat

    async def getone(self, timeout_ms: int | None = None) -> ConsumerRecord | None:
        """One record (None when ``timeout_ms`` passes first; waits forever when it is None)."""
        while True:
            records = await self.poll(
                timeout_ms=timeout_ms if timeout_ms is not None else 1000, max_records=1
            )
            if records:
                return records[0]
            if timeout_ms is not None:
                return None

    def __aiter__(self):
        return self

    async def __anext__(self) -> ConsumerRecord:
        record = await self.getone()
        assert record is not None  # getone() without a timeout only returns records
        return record

    async def _wait(self, timeout: float) -> None:
        waits = [asyncio.ensure_future(self._fetcher.data_ready.wait())]
        if self._coordinator is not None:
            waits.append(asyncio.ensure_future(self._coordinator.rejoin_event.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when poll itself is cancelled, else the waits stay pending
            for task in waits:
                task.cancel()

    async def _prepare(self, deadline: float) -> None:
        """Everything poll does before taking records: rebalance, auto commit, positions, fetching.
        Waiting for the coordinator stops at ``deadline``; a join in flight is not waited for."""
        if not await self._finish_leaving(deadline):
            return  # unsubscribe's leave is still under way
        if self._coordinator is not None:
            if self._subscriptions.mode == AUTO_TOPICS:
                if self._subscriptions.pattern is None:
                    await self._subscription_metadata()
                    if isinstance(self._membership, GroupMembership):
                        self._refresh_metadata()
                elif not isinstance(self._membership, ConsumerMembership):
                    await self._match_pattern()
                await self._coordinator.ensure_active(deadline)
            self._coordinator.last_poll = time.monotonic()  # callbacks that ran in it count as polling
            if self.config.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
                self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
                if not await self._commit_quietly(deadline=deadline, periodic=True):
                    # Kafka's maybeAutoCommitOffsetsAsync: a retriable failure (no coordinator yet,
                    # one moving, no answer by poll's deadline) tries again after retry.backoff.ms,
                    # not a whole auto.commit.interval.ms later.
                    self._next_auto_commit = time.monotonic() + self.config.retry_backoff_ms / 1000
        if self._subscriptions.missing_positions():
            await self._update_positions(deadline)
        await self._fetcher.ensure_running()

    async def _subscription_metadata(self) -> None:
        """Ask Metadata for the subscribed topics once per subscription, with allow.auto.create.topics
        (Metadata v4+'s allow_auto_topic_creation): a broker with auto.create.topics.enable creates a
        missing one only if both allow it, as for Kafka's consumers. The classic protocol then refreshes
        them every metadata.max.age.ms (:meth:`_refresh_metadata`)."""
        topics = frozenset(self._subscriptions.topics)
        if topics == self._metadata_topics:
            return
        if isinstance(self._membership, GroupMembership):
            watch = self._membership.metadata_watch
            asked = sorted(topics | watch.topics)
            version = watch.next_version()
            metadata = await self._client.metadata(asked, auto_create=self.config.allow_auto_create_topics)
            watch.update(version, partition_counts(metadata, asked))
            self._next_metadata_refresh = time.monotonic() + self.config.metadata_max_age_ms / 1000
        else:
            await self._client.metadata(sorted(topics), auto_create=self.config.allow_auto_create_topics)
        self._metadata_topics = topics

    def _refresh_metadata(self) -> None:
        """Classic protocol: every metadata.max.age.ms, Metadata for the subscribed topics and, on the
        leader, every topic of the group's, as Kafka's consumers refresh theirs. It runs in a task of its
        own (poll does not wait for it); the answer goes to the membership's metadata watch, and if the
        leader sees the partitions changed since it assigned, the waiting poll wakes up to rejoin."""
        now = time.monotonic()
        if self._metadata_refresh is not None or now < self._next_metadata_refresh:
            return
        self._next_metadata_refresh = now + self.config.metadata_max_age_ms / 1000
        watch = self._membership.metadata_watch
        topics = sorted(self._subscriptions.topics | watch.topics)
        version = watch.next_version()
        task = asyncio.get_running_loop().create_task(
            self._client.metadata(topics, auto_create=self.config.allow_auto_create_topics)
        )
        self._metadata_refresh = task

        def refreshed(task: asyncio.Task) -> None:
            if self._metadata_refresh is task:
                self._metadata_refresh = None
            if task.cancelled():
                return
            error = task.exception()
            if error is not None:
                # The fetcher reports a broker outage; this only retries sooner than the next max age.
                log.log(
                    logging.DEBUG if isinstance(error, (KafkaError, OSError)) else logging.WARNING,
                    "metadata refresh of the subscribed topics failed: %r",
                    error,
                )
                self._next_metadata_refresh = time.monotonic() + self.config.retry_backoff_ms / 1000
                return
            watch.update(version, partition_counts(task.result(), topics))
            coordinator = self._coordinator
            if (
                self._subscriptions.mode == AUTO_TOPICS
                and isinstance(coordinator, GroupCoordinator)
                and coordinator.check_metadata()
            ):
                coordinator.rejoin_event.set()  # the poll waiting for records rejoins now

        task.add_done_callback(refreshed)

    def _pattern(self) -> str | None:
        pattern = self._subscriptions.pattern
        return None if pattern is None else pattern.pattern

    async def _match_pattern(self) -> None:
        """Classic protocol: resolve the pattern against the cluster's topics, and rejoin when the
        matches changed (a topic created or deleted)."""
        now = time.monotonic()
        if now < self._next_pattern_match:
            return
        self._next_pattern_match = now + self.config.metadata_max_age_ms / 1000
        watch = self._membership.metadata_watch
        version = watch.next_version()
        metadata = await self._client.metadata(None)
        watch.update(version, partition_counts(metadata, metadata.topics.keys() | watch.topics))
        names = [name for name, info in metadata.topics.items() if not info.internal]
        if self._subscriptions.match_pattern(names):
            log.info("subscription pattern now matches %s", sorted(self._subscriptions.topics))
            self._membership.request_rejoin()

    async def _finish_leaving(self, deadline: float) -> bool:
        """Wait until ``deadline`` for unsubscribe's leave; whether it is over."""
        leaving = self._leaving
        if leaving is None:
            return True
        await asyncio.wait({leaving}, timeout=max(deadline - time.monotonic(), 0))  # never cancels it
        if not leaving.done():
            return False
        if self._leaving is leaving:
            self._leaving = None
            leaving.result()
        return True

    # -- positions -------------------------------------------------------------------------------

    async def _update_positions(self, deadline: float) -> None:
        missing = self._subscriptions.missing_positions()
        to_reset: dict[str, list[TopicPartition]] = {}
        committed: dict = {}
        plain = [tp for tp in missing if self._subscriptions.state(tp).reset_strategy is None]
        if self._coordinator is not None and plain:
            committed = await self._coordinator.fetch_committed(plain, deadline=deadline)
        for tp in missing:
            st = self._subscriptions.state(tp)
            found = committed.get(tp)
            if st.reset_strategy is None and found is not None:
                st.seek(found[0])
                continue
            strategy = st.reset_strategy or self.config.auto_offset_reset
            if strategy == "none":
                raise NoOffsetForPartition(
                    f"{tp.topic}-{tp.partition} has no committed offset and auto.offset.reset=none: seek() first"
                )
            to_reset.setdefault(strategy, []).append(tp)
        for strategy, tps in to_reset.items():
            timestamp = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
            offsets = await self._list_offsets(tps, timestamp)
            for tp, offset in offsets.items():
                self._subscriptions.state(tp).seek(offset)
        self._fetcher.wake()

    async def _list_offsets(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        result = {}
        for topic, ps in by_topic.items():
            offsets = await self._client.list_offsets(
                topic, ps, timestamp=timestamp, isolation_level=self.config.isolation_level_code
            )
            result.update({TopicPartition(topic, p): o for p, o in offsets.items()})
        return result

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll."""
        offset = check_int(offset, "offset", minimum=0)
        partition = _topic_partition(partition)
        self._subscriptions.state(TopicPartition(*partition)).seek(offset)
        if self._fetcher is not None:
            self._fetcher.clear_buffers([TopicPartition(*partition)])
            self._fetcher.wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions, EARLIEST_TIMESTAMP)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """To the log end offset, or the last stable offset with read_committed."""
        await self._seek_to(partitions, LATEST_TIMESTAMP)

    async def _seek_to(self, partitions, timestamp: int) -> None:
        if not self._started:
            await self.start()
        tps = [TopicPartition(*tp) for tp in partitions] or self._subscriptions.assigned()
        for tp, offset in (await self._list_offsets(tps, timestamp)).items():
            self.seek(tp, offset)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        if not self._started:
            await self.start()
        return await self._list_offsets([TopicPartition(*tp) for tp in partitions], EARLIEST_TIMESTAMP)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        if not self._started:
            await self.start()
        return await self._list_offsets([TopicPartition(*tp) for tp in partitions], LATEST_TIMESTAMP)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll returns for ``partition`` (resolving it if needed, within
        default.api.timeout.ms, else :class:`ConsumerTimeout`)."""
        tp = TopicPartition(*partition)
        st = self._subscriptions.state(tp)
        if st.position is None:
            if not self._started:
                await self.start()
            await self._update_positions(time.monotonic() + self.config.default_api_timeout_ms / 1000)
        return self._subscriptions.state(tp).position

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscriptions.state(TopicPartition(*tp)).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscriptions.state(TopicPartition(*tp)).paused = False
        if self._fetcher is not None:
            self._fetcher.wake()

    # -- commits ---------------------------------------------------------------------------------

    def _require_group(self) -> GroupCoordinatorBase:
        if self.config.group_id is None:
            raise KafkaError(
                "committing and reading committed offsets need group.id in the consumer's config"
            )
        if self._coordinator is None:
            raise KafkaError("the consumer is not started: call start() or poll first")
        return self._coordinator

    def _api_deadline(self, timeout_ms: int | None) -> float:
        return (
            time.monotonic()
            + (self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        )

    async def committed(
        self, partitions: TopicPartition | Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> OffsetAndMetadata | None | dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offset of one partition (None if none), or a dict for several. Raises
        :class:`ConsumerTimeout` if the coordinator cannot answer within ``timeout_ms``
        (default.api.timeout.ms)."""
        if not self._started:
            await self.start()
        coordinator = self._require_group()
        single = isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str)
        tps = [TopicPartition(*partitions)] if single else [TopicPartition(*tp) for tp in partitions]
        started = time.perf_counter()
        try:
            found = await coordinator.fetch_committed(tps, deadline=self._api_deadline(timeout_ms))
        finally:
            timed(self._metrics.committed_time, started)
        result = {tp: (OffsetAndMetadata(*found[tp]) if found.get(tp) else None) for tp in tps}
        return result[tps[0]] if single else result

    def _current_positions(self, partitions: Iterable[TopicPartition] | None = None) -> dict:
        states = self._subscriptions.partitions
        tps = states.keys() if partitions is None else partitions
        return {
            tp: (states[tp].position, "") for tp in tps if tp in states and states[tp].position is not None
        }

    async def commit(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata | tuple[int, str]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition), or every current position.
        Raises :class:`CommitFailed` when the group rebalanced in between (:class:`RebalanceInProgress`
        while it is rebalancing: poll, then commit again), :class:`ConsumerTimeout` when the coordinator
        cannot take it within ``timeout_ms`` (default.api.timeout.ms), or the broker's error."""
        if not self._started:
            await self.start()
        self._require_group()
        m = self._membership
        if self._subscriptions.mode == AUTO_TOPICS and m is not None and not m.active:
            # Kafka's rule: a subscribed member commits under its generation, so not between two.
            raise RebalanceInProgress(
                f"commit to group {self.config.group_id!r}: the consumer is not in an active generation "
                "(a rebalance is in progress, or it left the group); poll() to rejoin, then commit again"
            )
        if offsets is None:
            normalised = self._current_positions()
        else:
            normalised = {}
            for tp, value in offsets.items():
                if isinstance(value, int):
                    normalised[TopicPartition(*tp)] = (value, "")
                else:
                    normalised[TopicPartition(*tp)] = (value[0], value[1] if len(value) > 1 else "")
        started = time.perf_counter()
        try:
            await self._commit_offsets(normalised, self._api_deadline(timeout_ms))
        finally:
            timed(self._metrics.commit_sync_time, started)
        self._last_committed.update({tp: o for tp, (o, _m) in normalised.items()})

    async def _commit_offsets(self, offsets: dict, deadline: float) -> None:
        """One commit through the coordinator; a successful one counts in commit-total and its
        latency in commit-latency-* (consumer-coordinator-metrics)."""
        started = time.monotonic()
        await self._coordinator.commit(offsets, deadline=deadline)
        self._metrics.committed_offsets(started, time.monotonic())

    def commit_async(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict, BaseException | None], Any] | None = None,
    ) -> asyncio.Task:
        """Start a commit without waiting; ``callback(offsets, error)`` runs when it finishes."""
        snapshot = (
            offsets if offsets is not None else {tp: o for tp, (o, _m) in self._current_positions().items()}
        )

        async def run() -> None:
            error = None
            try:
                await self.commit(snapshot)
            except Exception as exc:
                error = exc
                if callback is None:
                    log.warning("async commit failed: %s", exc)
            if callback is not None:
                callback(snapshot, error)

        return asyncio.get_running_loop().create_task(run())

    async def _commit_quietly(
        self, partitions: list[TopicPartition] | None = None, *, deadline: float, periodic: bool = False
    ) -> bool:
        """Auto commit: positions that moved since the last commit, retried until ``deadline``; failures
        are logged (the records will be read again, never skipped; a ``periodic`` one's retriable
        failures at DEBUG, as Kafka's, since poll tries again within retry.backoff.ms). Nothing while a
        subscribed member is between generations. False when it failed with a retriable error."""
        m = self._membership
        if self._coordinator is None or (
            self._subscriptions.mode == AUTO_TOPICS and m is not None and not m.active
        ):
            return True
        positions = {
            tp: om
            for tp, om in self._current_positions(partitions).items()
            if self._last_committed.get(tp) != om[0]
        }
        if not positions:
            return True
        try:
            await self._commit_offsets(positions, deadline)
            self._last_committed.update({tp: o for tp, (o, _m) in positions.items()})
        except CommitFailed as exc:
            log.info("auto commit skipped: %s", exc)
        except (KafkaError, OSError) as exc:
            retriable = isinstance(exc, OSError) or exc.retriable
            log.log(
                logging.DEBUG if periodic and retriable else logging.WARNING, "auto commit failed: %s", exc
            )
            return not retriable
        return True
