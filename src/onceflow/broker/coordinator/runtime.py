"""One write path for the coordinators, in the shape of Kafka 4's ``CoordinatorRuntime``.

A coordinator (the group coordinator on ``__consumer_offsets``, the transaction coordinator on
``__transaction_state``) is a *shard*: state plus a ``replay(partition, batch)`` that folds one batch
of its internal topic into that state. It never writes. Everything that changes it is an
*operation*: a function of the current state that returns a :class:`CoordinatorResult` (the records,
the response). For each operation the runtime:

1. runs it (it reads the state and must not change it);
2. appends its records to the partition as one batch (:class:`PartitionWriter`);
3. replays that batch into the state, with the same ``replay`` that loading a partition uses;
4. holds the response until the batch is committed: at or below the partition's high watermark.

A failed append changes nothing: the state is as it was and the operation fails with the error
Kafka gives for it (:func:`append_error`: NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE for the
storage and replication errors, both retriable). So the state is always a replay of the log, and a
broker that loads the partition after a failover builds exactly the state whose answers were given.

Per partition the runtime keeps a status and a coordinator epoch (the partition's leader epoch once
there is replication; a constant until then): *loading* replays the partition's batches and
activates it, *unloading* drops its state, cancels its timers and fails what still waits with
NOT_COORDINATOR. An operation for a partition that is not active fails with
COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR.

Events of a partition run one at a time, in order: operations (the event loop runs one at a time;
an operation may not start another on its own partition), timer expiries (:meth:`schedule_timer`:
timers are operations too, run when due and dropped if the partition was unloaded meanwhile), and
the completions of waiting responses, which an operation that is running queues until it is done.

Sans-IO: the runtime never awaits. Responses wait through callbacks (:meth:`when_committed`,
:meth:`hold`); :mod:`onceflow.broker.coordinator.commits` turns them into awaitables for the broker.
With a writer whose appends commit at once (one broker, or the in-memory writer of the tests) a
response is released before the operation returns.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from onceflow.broker.coordinator.records import CoordinatorResult, StoredBatch
from onceflow.broker.coordinator.scheduler import Scheduler, TimerHandle
from onceflow.broker.coordinator.writer import PartitionWriter
from onceflow.protocol.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    ErrorCode,
    KafkaError,
    NotCoordinator,
    error_code_for,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Kafka's CoordinatorTimer backoff before a timer whose write failed runs again.
TIMER_RETRY_BACKOFF_MS = 500

# The coordinator epoch a broker loads every partition under at start: one broker owns them all, and
# markers of its earlier runs carry the same epoch. With replication a partition is loaded under its
# leader epoch instead.
STARTUP_COORDINATOR_EPOCH = 0


class CoordinatorShard(Protocol):
    def replay(self, partition: int, batch: StoredBatch) -> None:
        """Fold one batch of ``partition`` into the state (loading and live writes alike)."""
        ...

    def on_loaded(self, partition: int) -> None:
        """The partition is replayed and active: start what runs on it (timers, unfinished work)."""
        ...

    def on_unloaded(self, partition: int) -> None:
        """Forget the state of ``partition``: another broker may own it now."""
        ...


class PartitionStatus(enum.Enum):
    INACTIVE = "inactive"  # never loaded, or unloaded: NOT_COORDINATOR
    LOADING = "loading"  # COORDINATOR_LOAD_IN_PROGRESS
    ACTIVE = "active"
    FAILED = "failed"  # the load failed: NOT_COORDINATOR until loaded again


def append_error(exc: BaseException, what: str) -> KafkaError:
    """What a client is told when an internal-topic append failed: Kafka's mapping of storage and
    replication errors for coordinators (``GroupCoordinatorService`` / ``TransactionStateManager``).
    Both coordinator codes are retriable: the client finds the coordinator again and resends."""
    # A write that failed on the disk is Kafka's KAFKA_STORAGE_ERROR, whoever raised it.
    code = ErrorCode.KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else error_code_for(exc)
    message = f"{what}: append failed: {exc}"
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return CoordinatorNotAvailable(message)
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return NotCoordinator(message)
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return KafkaError(message, ErrorCode.UNKNOWN_SERVER_ERROR)
    if isinstance(exc, KafkaError):
        return exc
    return KafkaError(f"{what}: append failed: {exc!r}", ErrorCode.UNKNOWN_SERVER_ERROR)


class _Timer:
    """A timer of one partition; cancelling it (or replacing it under its key) stops it for good."""

    __slots__ = ("key", "cancelled", "handle")

    def __init__(self, key: object) -> None:
        self.key = key
        self.cancelled = False
        self.handle: TimerHandle | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()


CommitCallback = Callable[[KafkaError | None], None]


class _Partition:
    __slots__ = (
        "index",
        "status",
        "epoch",
        "last_written",
        "committed",
        "waiting",
        "timers",
        "running",
        "queued",
        "released",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.status = PartitionStatus.INACTIVE
        self.epoch = -1
        self.last_written = 0  # the log end after the last batch appended (or found when loading)
        self.committed = 0  # the high watermark as last heard
        # (offset, callback): called once ``committed >= offset``; offsets never decrease.
        self.waiting: deque[tuple[int, CommitCallback]] = deque()
        self.timers: dict[object, _Timer] = {}
        self.running = False
        self.queued: deque[Callable[[], None]] = deque()  # events that arrived during an operation
        self.released: list[Callable[[KafkaError | None], None]] | None = None  # held during one


class CoordinatorRuntime:
    """The runtime of one coordinator over one internal topic (``name`` is for messages)."""

    def __init__(
        self,
        name: str,
        writer: PartitionWriter,
        shard: CoordinatorShard,
        scheduler: Scheduler,
        *,
        timer_retry_backoff_ms: int = TIMER_RETRY_BACKOFF_MS,
    ) -> None:
        self.name = name
        self.writer = writer
        self._shard = shard
        self._scheduler = scheduler
        self._timer_retry_backoff_ms = timer_retry_backoff_ms
        self._partitions: dict[int, _Partition] = {}
        self._timer_keys = itertools.count()
        writer.set_high_watermark_listener(self._on_high_watermark)

    @property
    def num_partitions(self) -> int:
        return self.writer.num_partitions

    def _ctx(self, partition: int) -> _Partition:
        ctx = self._partitions.get(partition)
        if ctx is None:
            if not 0 <= partition < self.writer.num_partitions:
                raise NotCoordinator(f"{self.name} has no partition {partition}")
            ctx = self._partitions[partition] = _Partition(partition)
        return ctx

    # -- status ----------------------------------------------------------------------------------

    def status(self, partition: int) -> PartitionStatus:
        return self._ctx(partition).status

    def epoch(self, partition: int) -> int:
        """The coordinator epoch the partition was loaded with (-1 if never)."""
        return self._ctx(partition).epoch

    def active_partitions(self) -> list[int]:
        return sorted(p for p, ctx in self._partitions.items() if ctx.status is PartitionStatus.ACTIVE)

    def check_active(self, partition: int) -> None:
        status = self._ctx(partition).status
        if status is PartitionStatus.ACTIVE:
            return
        if status is PartitionStatus.LOADING:
            raise CoordinatorLoadInProgress(f"{self.name}-{partition} is loading")
        raise NotCoordinator(f"this broker is not the coordinator of {self.name}-{partition}")

    # -- loading and unloading ---------------------------------------------------------------------

    def load(self, partition: int, epoch: int) -> bool:
        """Replay ``partition`` from its log start and serve it under ``epoch``. A partition already
        loaded under this epoch or a newer one is left alone (returns False); one whose load was
        begun under this epoch (:meth:`begin_load`) is loaded now."""
        ctx = self._ctx(partition)
        begun = ctx.status is PartitionStatus.LOADING and ctx.epoch == epoch
        if not begun and not self.begin_load(partition, epoch):
            return False
        try:
            for batch in self.writer.read(partition):
                self._shard.replay(partition, batch)
        except Exception:
            self._fail_load(partition)
            raise
        self.finish_load(partition)
        return True

    def begin_load(self, partition: int, epoch: int) -> bool:
        """Start loading: from now until :meth:`finish_load` the partition answers
        COORDINATOR_LOAD_IN_PROGRESS. Batches replayed meanwhile go through :meth:`replay_loaded`."""
        ctx = self._ctx(partition)
        if ctx.status in (PartitionStatus.ACTIVE, PartitionStatus.LOADING) and epoch <= ctx.epoch:
            return False
        if ctx.status is not PartitionStatus.INACTIVE:
            self._drop(ctx, f"reloaded under epoch {epoch}")
        ctx.status = PartitionStatus.LOADING
        ctx.epoch = epoch
        return True

    def replay_loaded(self, partition: int, batch: StoredBatch) -> None:
        if self._ctx(partition).status is not PartitionStatus.LOADING:
            raise RuntimeError(f"{self.name}-{partition} is not loading")
        self._shard.replay(partition, batch)

    def finish_load(self, partition: int) -> None:
        ctx = self._ctx(partition)
        if ctx.status is not PartitionStatus.LOADING:
            raise RuntimeError(f"{self.name}-{partition} is not loading")
        ctx.last_written = self.writer.log_end_offset(partition)
        ctx.committed = self.writer.high_watermark(partition)
        ctx.status = PartitionStatus.ACTIVE
        self._shard.on_loaded(partition)
        log.debug("%s-%d loaded under coordinator epoch %d", self.name, partition, ctx.epoch)

    def _fail_load(self, partition: int) -> None:
        ctx = self._ctx(partition)
        log.exception("%s-%d: loading failed", self.name, partition)
        self._drop(ctx, "its load failed")
        ctx.status = PartitionStatus.FAILED

    def unload(self, partition: int, epoch: int | None = None) -> None:
        """Stop serving ``partition`` and drop its state (``epoch``: only if it is not older than the
        one loaded, so a late unload never undoes a newer load)."""
        ctx = self._ctx(partition)
        if ctx.status is PartitionStatus.INACTIVE or (epoch is not None and epoch < ctx.epoch):
            return
        self._drop(ctx, "unloaded")

    def unload_all(self) -> None:
        for partition in list(self._partitions):
            self.unload(partition)

    def _drop(self, ctx: _Partition, why: str) -> None:
        for timer in ctx.timers.values():
            timer.cancel()
        ctx.timers.clear()
        ctx.status = PartitionStatus.INACTIVE
        waiting, ctx.waiting = ctx.waiting, deque()
        error = NotCoordinator(f"{self.name}-{ctx.index} moved: {why}")
        for _offset, callback in waiting:
            callback(error)
        self._shard.on_unloaded(ctx.index)

    # -- operations --------------------------------------------------------------------------------

    def write(self, partition: int, op: Callable[[], CoordinatorResult[T]]) -> T | None:
        """Run ``op`` on ``partition``, append its batch, replay it, and return the response. The
        response may go to a client only once the partition's :meth:`last_written_offset` (as of the
        return) is committed: see :meth:`when_committed`. Raises the operation's own KafkaError, or
        :func:`append_error` of a failed append (after ``on_failed``), with the state unchanged."""
        ctx = self._ctx(partition)
        self.check_active(partition)
        if ctx.running:
            raise RuntimeError(f"{self.name}-{partition}: an operation started another on its partition")
        ctx.running = True
        ctx.released = []
        try:
            result = op()
            batch = result.to_batch()
            if batch is not None:
                try:
                    end = self.writer.append(partition, batch)
                except Exception as exc:
                    error = append_error(exc, f"{self.name}-{partition}")
                    log.warning("%s", error)
                    if result.on_failed is not None:
                        result.on_failed(error)
                    raise error from exc
                ctx.last_written = max(ctx.last_written, end)
                self._replay_written(ctx, batch)
            if result.on_written is not None:
                result.on_written()
            return result.response
        finally:
            ctx.running = False
            self._release(ctx)

    def reload_soon(self, partition: int) -> None:
        """Rebuild ``partition``'s state from its log once the running operation is done (at once if
        none runs): for an operation that changed memory before its write, and whose write failed.
        What waits is answered NOT_COORDINATOR, as after a failover (which is what Kafka does on a
        storage error: the partition's leadership moves)."""
        ctx = self._ctx(partition)
        if ctx.running:
            ctx.queued.append(lambda: self._reload(ctx))
        else:
            self._reload(ctx)

    def _reload(self, ctx: _Partition) -> None:
        if ctx.status not in (PartitionStatus.ACTIVE, PartitionStatus.FAILED):
            return
        epoch = ctx.epoch
        log.warning("%s-%d: rebuilding the state from the log", self.name, ctx.index)
        self._drop(ctx, "its state is rebuilt from the log")
        self.load(ctx.index, epoch)

    def _replay_written(self, ctx: _Partition, batch: StoredBatch) -> None:
        try:
            self._shard.replay(ctx.index, batch)
        except Exception as exc:
            # The batch is in the log but the state may hold part of it: rebuild the state from the log.
            log.exception("%s-%d: replaying a written batch failed", self.name, ctx.index)
            ctx.queued.append(lambda: self._reload(ctx))
            raise KafkaError(f"{self.name}-{ctx.index}: replay failed: {exc!r}") from exc

    def read(self, partition: int, fn: Callable[[], R]) -> R:
        """Run a read-only ``fn`` on an active partition (its answer waits like a write's)."""
        self.check_active(partition)
        return fn()

    def last_written_offset(self, partition: int) -> int:
        return self._ctx(partition).last_written

    def committed_offset(self, partition: int) -> int:
        return self._ctx(partition).committed

    # -- waiting for commits -----------------------------------------------------------------------

    def when_committed(self, partition: int, offset: int, callback: CommitCallback) -> None:
        """Call ``callback(None)`` once ``partition`` is committed up to ``offset`` (at once if it is
        already), or ``callback(error)`` if the partition is unloaded first."""
        ctx = self._ctx(partition)
        if ctx.status is not PartitionStatus.ACTIVE:
            callback(NotCoordinator(f"{self.name}-{partition} is not active"))
        elif offset <= ctx.committed and not ctx.waiting:
            callback(None)
        else:
            ctx.waiting.append((offset, callback))

    def is_committed(self, partition: int, offset: int) -> bool:
        ctx = self._ctx(partition)
        return ctx.status is PartitionStatus.ACTIVE and offset <= ctx.committed

    def hold(self, partition: int, deliver: Callable[[KafkaError | None], None]) -> None:
        """Deliver something an operation produced once everything that operation wrote is
        committed: called during an operation, at its end; otherwise now."""
        ctx = self._ctx(partition)
        if ctx.running and ctx.released is not None:
            ctx.released.append(deliver)
        else:
            self.when_committed(partition, ctx.last_written, deliver)

    def _release(self, ctx: _Partition) -> None:
        released, ctx.released = ctx.released or [], None
        for deliver in released:
            self.when_committed(ctx.index, ctx.last_written, deliver)
        while ctx.queued and not ctx.running:
            event = ctx.queued.popleft()
            try:
                event()
            except Exception:
                log.exception("%s-%d: a queued event failed", self.name, ctx.index)

    def _on_high_watermark(self, partition: int, offset: int) -> None:
        ctx = self._partitions.get(partition)
        if ctx is None:
            return
        if offset > ctx.committed:
            ctx.committed = offset
        if ctx.running:
            ctx.queued.append(lambda: self._complete_waiting(ctx))
        else:
            self._complete_waiting(ctx)

    def _complete_waiting(self, ctx: _Partition) -> None:
        while ctx.waiting and ctx.waiting[0][0] <= ctx.committed:
            _offset, callback = ctx.waiting.popleft()
            try:
                callback(None)
            except Exception:
                log.exception("%s-%d: a committed response failed", self.name, ctx.index)

    # -- timers ------------------------------------------------------------------------------------

    def schedule_timer(
        self,
        partition: int,
        delay_ms: int,
        op: Callable[[], CoordinatorResult[object] | None],
        *,
        key: object = None,
        retry: bool = True,
    ) -> _Timer:
        """Run ``op`` as an operation of ``partition`` in ``delay_ms`` (Kafka's ``CoordinatorTimer``).
        A timer with the ``key`` of a pending one replaces it. If the operation's append fails it runs
        again after a backoff (with ``retry``); if the partition was unloaded meanwhile, never."""
        ctx = self._ctx(partition)
        timer = _Timer(key if key is not None else ("anonymous", next(self._timer_keys)))
        previous = ctx.timers.pop(timer.key, None)
        if previous is not None:
            previous.cancel()
        if ctx.status not in (PartitionStatus.ACTIVE, PartitionStatus.LOADING):
            timer.cancelled = True
            return timer
        ctx.timers[timer.key] = timer
        epoch = ctx.epoch
        timer.handle = self._scheduler.call_later(delay_ms, lambda: self._fire(ctx, timer, epoch, op, retry))
        return timer

    def cancel_timer(self, partition: int, key: object) -> None:
        timer = self._ctx(partition).timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(
        self,
        ctx: _Partition,
        timer: _Timer,
        epoch: int,
        op: Callable[[], CoordinatorResult[object] | None],
        retry: bool,
    ) -> None:
        if timer.cancelled or ctx.epoch != epoch or ctx.status is not PartitionStatus.ACTIVE:
            return
        if ctx.running:
            ctx.queued.append(lambda: self._fire(ctx, timer, epoch, op, retry))
            return
        if ctx.timers.get(timer.key) is timer:
            del ctx.timers[timer.key]
        try:
            self.write(ctx.index, lambda: op() or CoordinatorResult())
        except KafkaError as exc:
            append_failed = exc.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            still_ours = ctx.status is PartitionStatus.ACTIVE and ctx.epoch == epoch
            if retry and append_failed and still_ours:
                log.info("%s-%d: timer %s failed (%s); retrying", self.name, ctx.index, timer.key, exc)
                self.schedule_timer(ctx.index, self._timer_retry_backoff_ms, op, key=timer.key, retry=retry)
                return
            log.warning("%s-%d: timer %s failed: %s", self.name, ctx.index, timer.key, exc)
        except Exception:
            log.exception("%s-%d: timer %s failed", self.name, ctx.index, timer.key)

    def timer_keys(self, partition: int) -> Iterable[object]:
        return list(self._ctx(partition).timers)
