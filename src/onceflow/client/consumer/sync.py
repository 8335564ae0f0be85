"""Consumer: the blocking facade over :class:`AsyncConsumer`, for scripts and Spark executors.

The async consumer runs on its own event loop in a daemon thread, so heartbeats keep going while the
caller processes records between polls (as the Java consumer's heartbeat thread does). Rebalance
callbacks run in a worker thread while the caller is blocked in ``poll``, with the event loop free: so a
callback may call the consumer's blocking methods, as Kafka's "commit in onPartitionsRevoked" does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.client.consumer.config import ConsumerConfig
from onceflow.client.consumer.consumer import AsyncConsumer, Listener
from onceflow.client.consumer.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)
from onceflow.client.metrics import MetricsSnapshot
from onceflow.protocol.errors import KafkaError
from onceflow.protocol.record_codec import Record


class Consumer:
    def __init__(
        self,
        *topics: str,
        config: ConsumerConfig | dict | None = None,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        on_lost: Listener | None = None,
        **settings: Any,
    ) -> None:
        on_assign, on_revoke, on_lost = (_off_the_loop(cb) for cb in (on_assign, on_revoke, on_lost))
        # Calls waiting on the loop from any thread: close() from another thread ends them (a poll
        # blocked there would otherwise wait for a loop that close() stops, for ever).
        self._waiting: set[concurrent.futures.Future] = set()
        self._closing = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="onceflow-consumer", daemon=True)
        self._thread.start()
        try:
            self._consumer: AsyncConsumer = self._run(
                self._make(topics, config, on_assign, on_revoke, on_lost, settings)
            )
            self._run(self._consumer.start())
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _make(topics, config, on_assign, on_revoke, on_lost, settings) -> AsyncConsumer:
        return AsyncConsumer(
            *topics, config=config, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost, **settings
        )

    def _run(self, coro, *, closing: bool = False):
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a blocking Consumer method was called on the consumer's own event loop thread "
                "(from an async callback?): it would wait for itself"
            )
        # While close() runs, only the rebalance callbacks it calls (commit in on_revoke) may call in.
        if self._loop.is_closed() or (self._closing and not closing and not _in_callback()):
            coro.close()  # never started: no "coroutine was never awaited" warning
            raise KafkaError("the consumer is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._waiting.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closing and not closing:
                raise KafkaError("the consumer was closed (by another thread) during this call") from None
            raise
        except BaseException:
            # Interrupted while waiting (Ctrl-C lands in the caller's thread): cancel the coroutine
            # too, so it does not go on behind the caller's back, racing close() and left pending
            # when the loop stops. A no-op when the coroutine itself raised.
            future.cancel()
            raise
        finally:
            self._waiting.discard(future)

    def _call(self, fn, *args, **kwargs):
        async def call():
            return fn(*args, **kwargs)

        return self._run(call())

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def config(self) -> ConsumerConfig:
        return self._consumer.config

    def close(self, *, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Leave the group (committing first with ``autocommit``) and stop. A call another thread is
        waiting in (a poll) ends with ``KafkaError`` "the consumer was closed"."""
        if self._loop.is_closed() or self._closing:
            return
        self._closing = True
        for future in list(self._waiting):
            future.cancel()  # its coroutine is cancelled on the loop before the close below starts
        try:
            self._run(self._consumer.close(autocommit=autocommit, timeout_ms=timeout_ms), closing=True)
        finally:
            for future in list(self._waiting):
                future.cancel()  # a callback's call still waiting: the loop stops now
            self._stop_loop()

    def subscribe(
        self, topics: Iterable[str] = (), *, pattern: str | None = None, **listeners: Listener | None
    ) -> None:
        wrapped = {name: _off_the_loop(cb) for name, cb in listeners.items()}
        self._call(self._consumer.subscribe, list(topics), pattern=pattern, **wrapped)

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._call(self._consumer.assign, list(partitions))

    def unsubscribe(self) -> None:
        self._call(self._consumer.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._consumer.assignment)

    def metrics(self) -> MetricsSnapshot:
        """The consumer's metrics now, with Kafka's names (see :meth:`AsyncConsumer.metrics`)."""
        return self._consumer.metrics()

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._call(self._consumer.group_metadata)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._run(self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records))

    def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        return self._run(self._consumer.getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll(timeout_ms=1000)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._call(self._consumer.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._run(self._consumer.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._run(self._consumer.seek_to_end(*partitions))

    def position(self, partition: TopicPartition) -> int:
        return self._run(self._consumer.position(partition))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._consumer.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._consumer.end_offsets(list(partitions)))

    def committed(self, partitions, *, timeout_ms: int | None = None):
        return self._run(self._consumer.committed(partitions, timeout_ms=timeout_ms))

    def commit(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        self._run(self._consumer.commit(offsets, timeout_ms=timeout_ms))

    def commit_async(self, offsets=None, callback=None) -> None:
        self._call(self._consumer.commit_async, offsets, callback)

    def pause(self, *partitions: TopicPartition) -> None:
        self._call(self._consumer.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._call(self._consumer.resume, *partitions)


_callback_state = threading.local()


def _in_callback() -> bool:
    return getattr(_callback_state, "active", False)


def _off_the_loop(callback: Listener | None) -> Listener | None:
    """A plain-function rebalance callback, run in a worker thread so that the blocking methods it may
    call (commit, committed, position) can use the consumer's event loop meanwhile."""
    if callback is None or inspect.iscoroutinefunction(callback):
        return callback

    def marked(partitions: list[TopicPartition]) -> Any:
        _callback_state.active = True
        try:
            return callback(partitions)
        finally:
            _callback_state.active = False

    async def in_worker(partitions: list[TopicPartition]) -> Any:
        result = await asyncio.to_thread(marked, partitions)
        if inspect.isawaitable(result):
            result = await result
        return result

    return in_worker
