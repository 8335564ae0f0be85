"""What the Spark layer needs from a cluster, on top of :class:`onceflow.client.AsyncClient`.

Spark calls the source and sink from plain (blocking) Python, on the driver and in executor
workers, so each :class:`BlockingCluster` owns a private event loop and one ``AsyncClient``. A
call that fails because a connection broke (a broker restart) is retried after a fresh connect,
a few times, before the error reaches Spark.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from onceflow.client import AsyncClient, BrokerConnectionError
from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from onceflow.client.security import ClientSecurity
from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError, UnknownTopicOrPartition
from onceflow.spark.offsets import PartitionOffsets, TopicPartition
from onceflow.spark.options import SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_ATTEMPTS = 10
RETRY_BACKOFF_S = 0.5
# Errors a broker answers while it is (re)starting or electing; worth asking again.
_RETRIABLE = COORDINATOR_MOVED | {
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


class BlockingCluster:
    """Blocking access to one cluster for the source and sink. Close it when done."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "onceflow-spark",
        request_timeout_s=30.0,
        security: ClientSecurity | None = None,
    ):
        self.bootstrap = bootstrap
        self._security = security  # TLS / SASL (the kafka.security.protocol, kafka.sasl.* options)
        self._client_id = client_id
        self._timeout = request_timeout_s
        # A plain loop, not asyncio.Runner: Runner.run installs and checks a SIGINT handler on every
        # call, and that check reprs the finished task, result included (a whole fetch response:
        # about a fifth of a reader's time went there).
        self._loop = asyncio.new_event_loop()
        self.client = self._new_client()

    def _new_client(self) -> AsyncClient:
        return AsyncClient(
            self.bootstrap,
            client_id=self._client_id,
            request_timeout_s=self._timeout,
            security=self._security,
        )

    def __enter__(self) -> BlockingCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.client.close())
        except Exception:  # closing after a broken connection must not hide the real error
            log.debug("closing the client failed", exc_info=True)
        finally:
            try:
                leftover = asyncio.all_tasks(self._loop)
                for task in leftover:
                    task.cancel()
                if leftover:
                    self._run(asyncio.gather(*leftover, return_exceptions=True))
                self._run(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    def call(self, make: Callable[[AsyncClient], Awaitable[T]]) -> T:
        """Run ``make(client)`` on the private loop, reconnecting and retrying on broken connections
        and retriable broker errors."""
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                return self._run(make(self.client))
            except (TimeoutError, BrokerConnectionError, ConnectionError) as exc:
                failure: Exception = exc
            except KafkaError as exc:
                if exc.code not in _RETRIABLE:
                    raise
                failure = exc
            if attempt + 1 == CONNECT_ATTEMPTS:
                raise failure
            log.info("cluster call failed (%s); retrying (%d/%d)", failure, attempt + 1, CONNECT_ATTEMPTS)
            self._run(self.client.close())
            self.client = self._new_client()
            time.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    # -- source support ------------------------------------------------------------------------

    def subscribed_partitions(self, options: SourceOptions) -> list[TopicPartition]:
        """The topic-partitions an ``assign`` / ``subscribe`` / ``subscribePattern`` read covers. A
        subscribed topic that does not exist fails the read, as in Spark (its admin client's
        describeTopics refuses it)."""
        if options.assign is not None:
            return sorted((t, p) for t, parts in options.assign.items() for p in parts)
        wanted = None if options.subscribe_pattern is not None else list(options.subscribe)
        metadata = self.call(lambda c: c.metadata(wanted))
        partitions = []
        for topic in metadata.topics.values():
            if wanted is not None and topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicOrPartition(f"subscribed topic {topic.name!r} does not exist")
            if topic.internal or topic.error != ErrorCode.NONE or not options.matches(topic.name):
                continue
            partitions.extend((topic.name, p) for p in topic.partitions)
        return sorted(partitions)

    def offsets(self, partitions: list[TopicPartition], *, timestamp: int, isolation_level: int):
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        result: PartitionOffsets = {}
        for topic, parts in by_topic.items():
            try:
                found = self.call(
                    lambda c, t=topic, ps=parts: c.list_offsets(
                        t, ps, timestamp=timestamp, isolation_level=isolation_level
                    )
                )
            except UnknownTopicOrPartition:
                raise UnknownTopicOrPartition(f"topic {topic!r} partitions {parts} do not exist")
            result.update({(topic, p): o for p, o in found.items()})
        return result

    def offsets_for_times(self, timestamps: PartitionOffsets, *, isolation_level: int) -> PartitionOffsets:
        """The first offset with a timestamp at or after each partition's, -1 where there is none
        (ListOffsets by timestamp; one request per topic and timestamp)."""
        groups: dict[int, list[TopicPartition]] = {}
        for tp, timestamp in timestamps.items():
            groups.setdefault(timestamp, []).append(tp)
        result: PartitionOffsets = {}
        for timestamp, partitions in groups.items():
            result.update(self.offsets(partitions, timestamp=timestamp, isolation_level=isolation_level))
        return result

    def earliest(self, partitions: list[TopicPartition]) -> PartitionOffsets:
        return self.offsets(partitions, timestamp=EARLIEST_TIMESTAMP, isolation_level=0)

    def latest(self, partitions: list[TopicPartition], isolation_level: int) -> PartitionOffsets:
        """The log end offsets, or the last stable offsets with read_committed."""
        return self.offsets(partitions, timestamp=LATEST_TIMESTAMP, isolation_level=isolation_level)
