"""The transaction coordinator: Kafka's InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn
rules, timeouts, expiry and recovery, on the coordinator runtime over ``__transaction_state``.

No sockets and no event loop of its own: every change of an id is an operation of the runtime
(:mod:`onceflow.broker.coordinator.runtime`), which appends the id's record, replays it into
:class:`TransactionStateManager` and lets the answer go once the record is committed; the async
methods only await that commit and the injected marker writer, so tests drive them with in-memory
fakes. Each request method either returns its result or raises a :class:`KafkaError` whose code is
the answer (handlers map PRODUCER_FENCED for old API versions with :func:`errors.wire_code`). A
failed append leaves the id as it was and answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE.

Concurrency: everything from reading a transactional id's state to the runtime's append and replay is
synchronous, so on one event loop no other request can slip in between. While its markers are
written a transaction's completion is pending, and other requests for that id get
CONCURRENT_TRANSACTIONS.

Ending a transaction: EndTxn appends PrepareCommit/PrepareAbort; that record is the decision, so
once it is committed the answer is success. The markers and CompleteCommit/CompleteAbort follow
either inline, before end_txn returns (the default; tests), or, with ``complete_in_background`` (the
broker), in a task that runs once the EndTxn answer has been written, as Kafka answers EndTxn before
its markers go out. That task is scheduled on the event loop before the answer leaves, so it runs
before any request the client sends after reading the answer: the producer's next transaction does
not meet CONCURRENT_TRANSACTIONS. Markers go out only once the decision is committed. If the markers
or the Complete append fail, the answer is still success and :meth:`retry_incomplete_transactions`
finishes the job later; the same method completes transactions found in Prepare* after a load.

Timers (the broker starts them with :meth:`TransactionCoordinator.start_timers`) are operations of
each loaded partition (:mod:`onceflow.broker.txn.timeouts`): aborting transactions past their
timeout, then finishing completions that failed; and removing idle transactional ids.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from onceflow.broker.coordinator.commits import committed
from onceflow.broker.coordinator.records import CoordinatorResult, StoredBatch
from onceflow.broker.coordinator.runtime import CoordinatorRuntime
from onceflow.broker.coordinator.scheduler import AsyncioScheduler, Scheduler
from onceflow.broker.coordinator.writer import PartitionWriter
from onceflow.broker.txn import timeouts
from onceflow.broker.txn.config import TransactionConfig, partition_for_key
from onceflow.broker.txn.end_txn import decide_end_txn
from onceflow.broker.txn.errors import (
    IllegalTxnTransition,
    TransactionAbortable,
    TransactionalIdNotFound,
    TwoPhaseCommitNotAllowed,
)
from onceflow.broker.txn.log_format import TopicPartition
from onceflow.broker.txn.markers import MarkerWriter, TxnMarker
from onceflow.broker.txn.metadata import (
    COMPLETE_STATES,
    PREPARE_STATES,
    TV_0,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
    TxnTransition,
    is_epoch_exhausted,
)
from onceflow.broker.txn.state_manager import (
    ListTransactionsResult,
    TransactionStateManager,
)
from onceflow.protocol.errors import (
    ConcurrentTransactions,
    ErrorCode,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    KafkaError,
    ProducerFenced,
    error_code_for,
)
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from onceflow.protocol.records import NO_PRODUCER_ID

log = logging.getLogger(__name__)


class ProducerIdSource(Protocol):
    def generate_producer_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One entry of a DescribeTransactions response."""

    transactional_id: str
    error_code: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: dict[str, list[int]] | None = None


def _system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    def __init__(
        self,
        *,
        log_writer: PartitionWriter,
        marker_writer: MarkerWriter,
        producer_ids: ProducerIdSource,
        config: TransactionConfig | None = None,
        clock_ms: Callable[[], int] = _system_clock_ms,
        complete_in_background: bool = False,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.config = config or TransactionConfig()
        self._markers = marker_writer
        self._producer_ids = producer_ids
        self._clock_ms = clock_ms
        self.state = TransactionStateManager(self.config)
        self.runtime = CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC, log_writer, self, scheduler or AsyncioScheduler()
        )
        self.state.runtime = self.runtime
        self._complete_in_background = complete_in_background
        self._completions: set[asyncio.Task[bool]] = set()
        self._timers_started = False

    # -- lifecycle -----------------------------------------------------------------------------------

    def load(self, coordinator_epoch: int, owned: Mapping[int, int] | None = None) -> None:
        """Load every partition of ``__transaction_state`` (one broker owns them all), or, on a
        cluster, only the ``owned`` ones ({partition: coordinator epoch}: those this broker leads);
        the others answer NOT_COORDINATOR until it leads them. Then await
        :meth:`retry_incomplete_transactions` to finish transactions caught in Prepare*."""
        for partition in range(self.runtime.num_partitions):
            if owned is None:
                self.load_partition(partition, coordinator_epoch)
            elif partition in owned:
                self.load_partition(partition, owned[partition])
            else:
                self.unload_partition(partition)

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Become the coordinator of the ids of ``partition`` (after a failover: its new leader)."""
        self.runtime.load(partition, coordinator_epoch)

    def unload_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Stop being the coordinator of the ids of ``partition`` and forget them."""
        self.runtime.unload(partition, coordinator_epoch)

    def begin_loading(self, coordinator_epoch: int) -> None:
        """From now until :meth:`load_from_records`, requests get COORDINATOR_LOAD_IN_PROGRESS."""
        for partition in range(self.runtime.num_partitions):
            self.runtime.begin_load(partition, coordinator_epoch)

    def load_from_records(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay ``__transaction_state`` (key, value) records in log order and start serving (the
        records given rather than read through the writer: tests, tools)."""
        self.state.load_from_records(records)

    async def drain_completions(self) -> None:
        """Wait for the markers of transactions whose EndTxn was already answered (stop, tests)."""
        while self._completions:
            await asyncio.wait(list(self._completions))

    def start_timers(self) -> None:
        """Run the abort and expiry timers on every loaded partition (and on those loaded later)."""
        self._timers_started = True
        for partition in self.runtime.active_partitions():
            timeouts.schedule_timers(self, partition)

    def stop_timers(self) -> None:
        self._timers_started = False
        for partition in range(self.runtime.num_partitions):
            for key in timeouts.TIMER_KEYS:
                self.runtime.cancel_timer(partition, key)

    def shutdown(self) -> None:
        self._timers_started = False
        self.runtime.unload_all()

    # -- the runtime's shard -------------------------------------------------------------------------

    def replay(self, partition: int, batch: StoredBatch) -> None:
        self.state.replay(partition, batch)

    def on_loaded(self, partition: int) -> None:
        self.state.on_loaded(partition)
        if self._timers_started:
            timeouts.schedule_timers(self, partition)

    def on_unloaded(self, partition: int) -> None:
        self.state.on_unloaded(partition)

    # -- writing one id's transition -----------------------------------------------------------------

    async def _write(
        self, metadata: TransactionMetadata, transition: TxnTransition, *, new: bool = False
    ) -> None:
        """Append ``transition`` (pending on ``metadata``) through the runtime, whose replay applies
        it, and return once it is committed. On failure the transition is dropped and the mapped
        error raised. ``new``: the id's first record (the id enters the cache by its replay)."""
        transactional_id = metadata.transactional_id
        partition = self.state.partition_for(transactional_id)
        record = self.state.record_of(transactional_id, transition)
        if new:
            self.state.expect_new(metadata)
        try:
            self.runtime.write(partition, lambda: CoordinatorResult([record]))
        except BaseException as exc:
            self.state.not_written(transactional_id)
            if metadata.pending_transition is transition:
                metadata.abort_transition(transition)
            log.info(
                "transactional id %r: append of %s failed: %s",
                transactional_id,
                transition.state.kafka_name,
                exc,
            )
            raise
        finally:
            if new:
                self.state.forget_new(transactional_id)
        metadata.awaiting_commit()
        try:
            await committed(self.runtime, partition)
        finally:
            metadata.committed()

    # -- InitProducerId ------------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        expected: ProducerIdAndEpoch | None = None,
        *,
        enable_2pc: bool = False,
    ) -> ProducerIdAndEpoch:
        """InitProducerId. ``transactional_id`` None: an idempotent producer, a fresh id at epoch 0.
        ``expected`` (KIP-360, v3+) is the producer's current id and epoch, or None for (-1, -1).
        ``enable_2pc`` (KIP-939, v6): the id's transactions are two-phase commit ones, never aborted
        on a timeout (``transaction.two.phase.commit.enable`` must allow it)."""
        result, _ = await self._init(transactional_id, txn_timeout_ms, expected, enable_2pc, False)
        return result

    async def init_keeping_prepared_txn(
        self, transactional_id: str, expected: ProducerIdAndEpoch | None = None
    ) -> tuple[ProducerIdAndEpoch, ProducerIdAndEpoch | None]:
        """InitProducerId v6 with enable2Pc and keepPreparedTxn (KIP-939): a producer taking over a
        transactional id whose transaction was prepared by a producer that is gone. An open two-phase
        commit transaction is kept (not aborted) and its producer fenced by an epoch bump; the answer
        is the new producer id and epoch, and the id and epoch that wrote the open transaction (None
        when none is open; the producer then starts afresh as after any InitProducerId)."""
        return await self._init(transactional_id, 0, expected, True, True)

    async def _init(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        expected: ProducerIdAndEpoch | None,
        enable_2pc: bool,
        keep_prepared_txn: bool,
    ) -> tuple[ProducerIdAndEpoch, ProducerIdAndEpoch | None]:
        if transactional_id is None:
            if enable_2pc or keep_prepared_txn:
                raise InvalidRequest("two-phase commit needs a transactional.id")
            return ProducerIdAndEpoch(self._producer_ids.generate_producer_id(), 0), None
        if not transactional_id:
            raise InvalidRequest("an empty transactional.id is not allowed")
        if enable_2pc and not self.config.transaction_two_phase_commit_enable:
            raise TwoPhaseCommitNotAllowed(
                f"transactional id {transactional_id!r} asks for two-phase commit, which "
                "transaction.two.phase.commit.enable does not allow on this broker"
            )
        if keep_prepared_txn and not enable_2pc:
            raise InvalidRequest("keepPreparedTxn is for two-phase commit producers (enable2Pc) only")
        self.state.validate_transaction_timeout(txn_timeout_ms, enable_2pc)
        if enable_2pc:
            txn_timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS
        metadata = self.state.get(transactional_id)
        new = metadata is None
        if metadata is None:
            # Not in the cache until its first record is replayed: a failed append leaves no trace.
            metadata = TransactionMetadata(
                transactional_id,
                producer_id=self._producer_ids.generate_producer_id(),
                txn_timeout_ms=txn_timeout_ms,
                txn_last_update_timestamp=self._clock_ms(),
            )
        ongoing = None
        if keep_prepared_txn and metadata.state is TransactionState.ONGOING:
            transition = self._prepare_keep(metadata, expected)
            ongoing = ProducerIdAndEpoch(metadata.producer_id, metadata.producer_epoch)
        else:
            transition = self._prepare_init(metadata, txn_timeout_ms, expected)
        if transition.epoch_fence:
            # A transaction is open: abort it under a bumped epoch (fencing the old producer), then
            # let the client retry; the retry bumps the epoch again (or rotates the producer id).
            await self._end_and_complete(metadata, transition)
            raise ConcurrentTransactions(
                f"transactional id {transactional_id!r} had an open transaction; it was aborted, retry"
            )
        await self._write(metadata, transition, new=new)
        log.info(
            "initialized transactional id %r: producer id %d epoch %d%s",
            transactional_id,
            transition.producer_id,
            transition.producer_epoch,
            f", keeping the prepared transaction of epoch {ongoing.producer_epoch}" if ongoing else "",
        )
        return ProducerIdAndEpoch(transition.producer_id, transition.producer_epoch), ongoing

    def _prepare_keep(
        self, metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None
    ) -> TxnTransition:
        if metadata.pending_transition_in_progress:
            raise ConcurrentTransactions(f"transactional id {metadata.transactional_id!r} is changing state")
        if expected is not None and not self._is_valid_expected_producer(metadata, expected):
            raise ProducerFenced(
                f"transactional id {metadata.transactional_id!r}: producer id {expected.producer_id} "
                f"is not the current {metadata.producer_id}"
            )
        if not metadata.is_two_phase_commit:
            # Kafka's rule: only a two-phase commit transaction may be kept; an ordinary one has a
            # timeout and belongs to its producer.
            raise InvalidTxnState(
                f"transactional id {metadata.transactional_id!r} has an open transaction that is not "
                "a two-phase commit one; it cannot be kept"
            )
        return metadata.prepare_keep_prepared_txn(self._clock_ms())

    def _prepare_init(
        self, metadata: TransactionMetadata, txn_timeout_ms: int, expected: ProducerIdAndEpoch | None
    ) -> TxnTransition:
        if metadata.pending_transition_in_progress:
            raise ConcurrentTransactions(f"transactional id {metadata.transactional_id!r} is changing state")
        if expected is not None and not self._is_valid_expected_producer(metadata, expected):
            raise ProducerFenced(
                f"transactional id {metadata.transactional_id!r}: producer id {expected.producer_id} "
                f"is not the current {metadata.producer_id}"
            )
        state = metadata.state
        now = self._clock_ms()
        if state in PREPARE_STATES:
            raise ConcurrentTransactions(
                f"transactional id {metadata.transactional_id!r} is completing a transaction"
            )
        if state is TransactionState.ONGOING:
            return metadata.prepare_fence_producer_epoch(now)
        if state is TransactionState.EMPTY or state in COMPLETE_STATES:
            if metadata.is_producer_epoch_exhausted and (
                expected is None or expected.producer_epoch == metadata.producer_epoch
            ):
                new_id = self._producer_ids.generate_producer_id()
                return metadata.prepare_producer_id_rotation(
                    new_id, txn_timeout_ms, now, expected is not None
                )
            return metadata.prepare_incr_producer_epoch(
                txn_timeout_ms, expected.producer_epoch if expected else None, now
            )
        raise IllegalTxnTransition(
            metadata.transactional_id, state, TransactionState.EMPTY, "found in a transient state"
        )

    @staticmethod
    def _is_valid_expected_producer(metadata: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
        # Accept: a just-created id (epoch -1: the producer recovers from UNKNOWN_PRODUCER_ID), the
        # current producer id (the epoch is checked when bumping), or the previous id with an
        # exhausted epoch (a retry of a rotation whose answer was lost).
        return (
            metadata.producer_epoch == -1
            or expected.producer_id == metadata.producer_id
            or (
                expected.producer_id == metadata.previous_producer_id
                and is_epoch_exhausted(expected.producer_epoch)
            )
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        transaction_version: int = TV_0,
    ) -> None:
        """AddPartitionsToTxn (client form, v0-v3; or the broker's implicit add for TV_2 produce)."""
        wanted = frozenset(partitions)
        metadata = self._checked_for_add(transactional_id, producer_id, producer_epoch)
        if metadata.state is TransactionState.ONGOING and wanted <= metadata.topic_partitions:
            return  # already in the transaction: nothing to write
        transition = metadata.prepare_add_partitions(wanted, self._clock_ms(), transaction_version)
        await self._write(metadata, transition)

    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        transaction_version: int = TV_0,
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        partition = partition_for_key(group_id, self.config.offsets_topic_num_partitions)
        await self.add_partitions_to_txn(
            transactional_id,
            producer_id,
            producer_epoch,
            [(CONSUMER_OFFSETS_TOPIC, partition)],
            transaction_version,
        )

    def _checked_for_add(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata:
        if not transactional_id:
            raise InvalidRequest("an empty transactional.id is not allowed")
        metadata = self.state.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"producer id {producer_id} is not the one of transactional id {transactional_id!r}"
            )
        if metadata.producer_epoch != producer_epoch:
            raise ProducerFenced(
                f"transactional id {transactional_id!r}: epoch {producer_epoch} is not the current {metadata.producer_epoch}"
            )
        if metadata.pending_transition_in_progress or metadata.state in PREPARE_STATES:
            raise ConcurrentTransactions(f"transactional id {transactional_id!r} is changing state")
        return metadata

    def verify_partitions_in_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ with ``verify_only`` (KIP-890 part 1): is each partition already in
        the transaction? NONE if so, TRANSACTION_ABORTABLE if not; a whole-transaction error (unknown
        id, fenced epoch, Prepare*) is given for every partition."""
        wanted = list(partitions)
        try:
            if not transactional_id:
                raise InvalidRequest("an empty transactional.id is not allowed")
            metadata = self.state.get(transactional_id)
            if metadata is None or metadata.producer_id != producer_id:
                raise InvalidProducerIdMapping(f"producer id {producer_id} does not own {transactional_id!r}")
            if metadata.producer_epoch != producer_epoch:
                raise ProducerFenced(f"epoch {producer_epoch} is not the current {metadata.producer_epoch}")
            if metadata.state in PREPARE_STATES:
                raise ConcurrentTransactions(
                    f"transactional id {transactional_id!r} is completing a transaction"
                )
        except KafkaError as exc:
            return dict.fromkeys(wanted, error_code_for(exc))
        return {
            tp: ErrorCode.NONE if tp in metadata.topic_partitions else TransactionAbortable.code
            for tp in wanted
        }

    # -- EndTxn --------------------------------------------------------------------------------------

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        transaction_version: int = TV_0,
    ) -> ProducerIdAndEpoch:
        """EndTxn. Returns the producer id and epoch for the producer's next transaction (EndTxn v5
        puts them in the response; with TV_2 the epoch is one higher, or a new id at epoch 0)."""
        if not transactional_id:
            raise InvalidRequest("an empty transactional.id is not allowed")
        metadata = self.state.get(transactional_id)
        if metadata is None:
            raise InvalidProducerIdMapping(f"transactional id {transactional_id!r} is unknown")
        decision = decide_end_txn(
            metadata,
            producer_id,
            producer_epoch,
            commit,
            transaction_version,
            self._producer_ids,
            self._clock_ms(),
        )
        if isinstance(decision, ProducerIdAndEpoch):
            return decision  # a retry of an EndTxn that already completed
        await self._write(metadata, decision)
        answer = _next_producer(metadata)
        if self._complete_in_background:
            self.complete_soon(metadata)
        else:
            await self._complete(metadata)
        return answer

    def complete_soon(self, metadata: TransactionMetadata) -> None:
        """Write the markers and Complete* of ``metadata``'s transaction in a task of its own."""
        # Not an eager task: it must run after the handler returns and its answer is written.
        task = asyncio.get_running_loop().create_task(
            self._complete(metadata), name=f"txn-complete-{metadata.transactional_id}"
        )
        self._completions.add(task)
        task.add_done_callback(self._completion_done)

    def _completion_done(self, task: asyncio.Task[bool]) -> None:
        self._completions.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # _complete handles the errors it expects; anything else is a bug, and the timer's
            # retry_incomplete_transactions will try again.
            log.error("completing a transaction failed", exc_info=task.exception())

    # -- completion (markers, then Complete*) --------------------------------------------------------

    async def _end_and_complete(self, metadata: TransactionMetadata, transition: TxnTransition) -> None:
        await self._write(metadata, transition)
        await self._complete(metadata)

    async def _complete(self, metadata: TransactionMetadata) -> bool:
        """Write the markers of a Prepare* transaction and append its Complete* state. Failures are
        logged and left to :meth:`retry_incomplete_transactions`; returns whether it completed."""
        if metadata.state not in PREPARE_STATES or metadata.pending_transition_in_progress:
            return False
        transactional_id = metadata.transactional_id
        partition = self.state.partition_for(transactional_id)
        marker = TxnMarker(
            transactional_id=transactional_id,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            coordinator_epoch=self.runtime.epoch(partition),
            commit=metadata.state is TransactionState.PREPARE_COMMIT,
            partitions=metadata.topic_partitions,
            transaction_version=metadata.client_transaction_version,
        )
        # Pending while the markers are written, as in Kafka: other requests get CONCURRENT_TRANSACTIONS.
        transition = metadata.prepare_complete(self._clock_ms())
        try:
            # No marker before the decision is committed: a new coordinator might not know of it.
            await committed(self.runtime, partition)
            if marker.partitions:
                await self._markers.write_markers(marker)
        except Exception as exc:
            if metadata.pending_transition is transition:
                metadata.abort_transition(transition)
            log.warning(
                "transactional id %r: markers not written yet (%s); will retry", transactional_id, exc
            )
            return False
        try:
            await self._write(metadata, transition)
        except KafkaError as exc:
            log.warning(
                "transactional id %r: %s not appended (%s); will retry",
                transactional_id,
                transition.state.kafka_name,
                exc,
            )
            return False
        log.debug("transactional id %r completed as %s", transactional_id, transition.state.kafka_name)
        return True

    async def retry_incomplete_transactions(self) -> list[str]:
        """Finish every transaction left in PrepareCommit/PrepareAbort (after a load, or after a failed
        marker write); returns the ids completed now. Call after loading and on the abort timer."""
        done = []
        for partition in self.runtime.active_partitions():  # on a cluster: those this broker leads
            for metadata in self.state.ids_of(partition):
                if await self._complete(metadata):
                    done.append(metadata.transactional_id)
        return done

    # -- timers --------------------------------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> list[str]:
        """Abort transactions open longer than their timeout, bumping the epoch so that the late
        producer is fenced, and complete them; returns the ids aborted."""
        aborted = []
        for partition in self.runtime.active_partitions():
            try:
                fenced = self.runtime.write(partition, lambda p=partition: self.fence_timed_out(p)) or []
                await committed(self.runtime, partition)
            except KafkaError as exc:
                log.warning("__transaction_state-%d: timeout aborts failed (%s)", partition, exc)
                continue
            for metadata in fenced:
                await self._complete(metadata)
                aborted.append(metadata.transactional_id)
        return aborted

    def fence_timed_out(self, partition: int) -> CoordinatorResult[list[TransactionMetadata]]:
        return timeouts.fence_timed_out(self.state, partition, self._clock_ms())

    async def expire_transactional_ids(self) -> list[str]:
        """Remove ids idle for ``transactional.id.expiration.ms`` (tombstones); returns them."""
        removed: list[str] = []
        for partition in self.runtime.active_partitions():
            try:
                removed += self.runtime.write(partition, lambda p=partition: self.expire_idle(p)) or []
                await committed(self.runtime, partition)
            except KafkaError as exc:
                log.warning("__transaction_state-%d: expiry failed (%s)", partition, exc)
        return removed

    def expire_idle(self, partition: int) -> CoordinatorResult[list[str]]:
        return timeouts.expire_idle(self.state, partition, self._clock_ms())

    # -- admin ---------------------------------------------------------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        return [self._describe(tid) for tid in transactional_ids]

    def _describe(self, transactional_id: str) -> TransactionDescription:
        try:
            if not transactional_id:
                raise InvalidRequest("an empty transactional.id is not allowed")
            metadata = self.state.get(transactional_id)
            if metadata is None or metadata.state is TransactionState.DEAD:
                raise TransactionalIdNotFound(transactional_id)
        except KafkaError as exc:
            return TransactionDescription(transactional_id, error_code_for(exc))
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.topic_partitions):
            topics.setdefault(topic, []).append(partition)
        return TransactionDescription(
            transactional_id=transactional_id,
            error_code=ErrorCode.NONE,
            state=metadata.state.kafka_name,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            transaction_timeout_ms=metadata.txn_timeout_ms,
            transaction_start_time_ms=metadata.txn_start_timestamp,
            topics=topics,
        )

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> ListTransactionsResult:
        """ListTransactions of the partitions served here; raises COORDINATOR_LOAD_IN_PROGRESS while loading."""
        return self.state.list_transactions(
            state_filters, producer_id_filters, duration_filter_ms, self._clock_ms()
        )


def _next_producer(metadata: TransactionMetadata) -> ProducerIdAndEpoch:
    """What the producer uses after this EndTxn: with an exhausted epoch under TV_2, the new id."""
    if metadata.next_producer_id != NO_PRODUCER_ID:
        return ProducerIdAndEpoch(metadata.next_producer_id, 0)
    return ProducerIdAndEpoch(metadata.producer_id, metadata.producer_epoch)
