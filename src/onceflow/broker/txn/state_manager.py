"""The transaction coordinator's state: every transactional id of the partitions of
``__transaction_state`` this broker has loaded, and the replay that builds it.

This is the coordinator's shard for the runtime (:mod:`onceflow.broker.coordinator.runtime`): loading a
partition replays its records here; a live write is appended by the runtime and then replayed here
through the same :meth:`TransactionStateManager.replay`. An id's record is its whole state (Kafka's
``TransactionLogValue``); a tombstone removes the id. A replayed record that is the transition the
coordinator prepared for that id completes it, so the id keeps what the log does not hold (the
previous epoch, for a retried InitProducerId); any other record replaces the state as loading does.
Unloading a partition forgets its ids.

Requests for an id of a partition that is loading get COORDINATOR_LOAD_IN_PROGRESS, of one that is not
loaded (never, or no longer) NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from onceflow.broker.coordinator.records import Record, StoredBatch
from onceflow.broker.coordinator.runtime import CoordinatorRuntime, PartitionStatus
from onceflow.broker.txn.config import TransactionConfig, partition_for_key
from onceflow.broker.txn.errors import InvalidTransactionTimeout
from onceflow.broker.txn.log_format import decode_key, decode_value, encode_key, encode_value_fields
from onceflow.broker.txn.metadata import TransactionMetadata, TransactionState, TxnTransition
from onceflow.protocol.errors import CoordinatorLoadInProgress

log = logging.getLogger(__name__)

_NOTHING = object()


@dataclass(frozen=True, slots=True)
class TimedOutTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's state name


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    transactions: list[ListedTransaction]
    unknown_state_filters: list[str]


def encoded_value(transition: TxnTransition) -> bytes:
    """The ``__transaction_state`` value of ``transition`` (as ``encode_value(transition.to_log_value())``,
    without the intermediate object)."""
    return encode_value_fields(
        transition.producer_id,
        transition.producer_epoch,
        transition.txn_timeout_ms,
        transition.state.id,
        transition.topic_partitions,
        transition.txn_last_update_timestamp,
        transition.txn_start_timestamp,
        transition.previous_producer_id,
        transition.next_producer_id,
        transition.client_transaction_version,
    )


def transition_record(transactional_id: str, transition: TxnTransition) -> Record:
    """The record of ``transition``: its state, or a tombstone for Dead."""
    value = None if transition.state is TransactionState.DEAD else encoded_value(transition)
    return encode_key(transactional_id), value


class TransactionStateManager:
    """The ids of the loaded partitions, and their replay (the runtime's shard)."""

    def __init__(self, config: TransactionConfig) -> None:
        self.config = config
        self._cache: dict[str, TransactionMetadata] = {}
        # Ids whose first record is being written: replay adopts the object the coordinator prepared.
        self._creating: dict[str, TransactionMetadata] = {}
        # The value of the record written for an id's pending transition (see record_of): replay
        # recognises it without encoding the transition again.
        self._written: dict[str, bytes | None] = {}
        self.runtime: CoordinatorRuntime | None = None  # set by the coordinator that owns both

    def _runtime(self) -> CoordinatorRuntime:
        if self.runtime is None:
            raise RuntimeError("the transaction state has no runtime")
        return self.runtime

    # -- status --------------------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_key(transactional_id, self._runtime().num_partitions)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The epoch markers for this id carry: its partition's coordinator epoch."""
        return self._runtime().epoch(self.partition_for(transactional_id))

    def active_partitions(self) -> set[int]:
        """For requests about every id (ListTransactions): the partitions served here, which may be
        none (a broker leading no ``__transaction_state`` partition lists nothing, as Kafka's
        TransactionStateManager does); COORDINATOR_LOAD_IN_PROGRESS while one is loading."""
        runtime = self._runtime()
        statuses = {p: runtime.status(p) for p in range(runtime.num_partitions)}
        if PartitionStatus.LOADING in statuses.values():
            raise CoordinatorLoadInProgress("the transaction coordinator is loading __transaction_state")
        return {p for p, status in statuses.items() if status is PartitionStatus.ACTIVE}

    # -- the runtime's shard -------------------------------------------------------------------------

    def replay(self, partition: int, batch: StoredBatch) -> None:
        for key, value in batch.records:
            if key:
                self._replay_record(key, value)

    def _replay_record(self, key: bytes, value: bytes | None) -> None:
        transactional_id = decode_key(key)
        metadata = self._cache.get(transactional_id) or self._creating.pop(transactional_id, None)
        pending = metadata.pending_transition if metadata is not None else None
        written = self._written.pop(transactional_id, _NOTHING)
        if pending is not None and written is not _NOTHING and written == value:
            metadata.complete_transition(pending)  # the write the coordinator prepared
            if value is None:
                self._cache.pop(transactional_id, None)
            else:
                self._cache[transactional_id] = metadata
            return
        decoded = decode_value(value)
        if decoded is None:
            self._cache.pop(transactional_id, None)
        elif metadata is None:
            self._cache[transactional_id] = TransactionMetadata.from_log_value(transactional_id, decoded)
        else:
            metadata.replace_with_log_value(decoded)
            self._cache[transactional_id] = metadata

    def on_loaded(self, partition: int) -> None:
        count = sum(1 for tid in self._cache if self.partition_for(tid) == partition)
        log.debug("__transaction_state-%d loaded: %d transactional ids", partition, count)

    def on_unloaded(self, partition: int) -> None:
        for transactional_id in [t for t in self._cache if self.partition_for(t) == partition]:
            del self._cache[transactional_id]

    def record_of(self, transactional_id: str, transition: TxnTransition) -> Record:
        """The record that writes ``transition`` (pending on the id), remembered for its replay."""
        record = transition_record(transactional_id, transition)
        self._written[transactional_id] = record[1]
        return record

    def not_written(self, transactional_id: str) -> None:
        """The record of :meth:`record_of` was not appended."""
        self._written.pop(transactional_id, None)

    def expect_new(self, metadata: TransactionMetadata) -> None:
        """``metadata`` is a new id whose first transition is about to be written."""
        self._creating[metadata.transactional_id] = metadata

    def forget_new(self, transactional_id: str) -> None:
        self._creating.pop(transactional_id, None)

    def load_from_records(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay ``(key, value)`` records of ``__transaction_state`` (every partition, each in log
        order) into partitions being loaded (``CoordinatorRuntime.begin_load``), then activate them."""
        runtime = self._runtime()
        loading = [p for p in range(runtime.num_partitions) if runtime.status(p) is PartitionStatus.LOADING]
        if not loading:
            raise RuntimeError("load_from_records without begin_loading")
        for key, value in records:
            partition = partition_for_key(decode_key(key), runtime.num_partitions)
            runtime.replay_loaded(partition, StoredBatch(((key, value),)))
        for partition in loading:
            runtime.finish_load(partition)
        log.info("loaded %d transactional ids from __transaction_state", len(self._cache))

    # -- cache ---------------------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        self._runtime().check_active(self.partition_for(transactional_id))
        return self._cache.get(transactional_id)

    def ids_of(self, partition: int) -> list[TransactionMetadata]:
        """The ids of one partition (active or not: the caller checks)."""
        return [m for t, m in self._cache.items() if self.partition_for(t) == partition]

    def all_metadata(self) -> Iterator[TransactionMetadata]:
        """The ids of every partition served here (see :meth:`active_partitions`)."""
        active = self.active_partitions()
        return iter([m for t, m in self._cache.items() if self.partition_for(t) in active])

    def validate_transaction_timeout(self, txn_timeout_ms: int, enable_2pc: bool = False) -> None:
        """A two-phase commit producer's timeout is not checked: its transactions have none."""
        if enable_2pc:
            return
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms {txn_timeout_ms} is not in (0, {self.config.transaction_max_timeout_ms}] "
                "(transaction.max.timeout.ms)"
            )

    # -- queries -------------------------------------------------------------------------------------

    def timed_out_transactions(self, partition: int, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions of ``partition`` older than their timeout and not already changing. A
        two-phase commit transaction (KIP-939) has no timeout: its outcome is its external
        coordinator's decision, and only EndTxn or an InitProducerId without keepPreparedTxn ends it."""
        return [
            m
            for m in self.ids_of(partition)
            if not m.pending_transition_in_progress
            and m.state is TransactionState.ONGOING
            and not m.is_two_phase_commit
            and m.txn_start_timestamp + m.txn_timeout_ms < now_ms
        ]

    def expirable_metadata(self, partition: int, now_ms: int) -> list[TransactionMetadata]:
        """Idle ids (Empty/Complete*) of ``partition`` untouched for ``transactional.id.expiration.ms``."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        return [
            m
            for m in self.ids_of(partition)
            if not m.pending_transition_in_progress
            and m.state.expiration_allowed
            and m.txn_last_update_timestamp <= horizon
        ]

    def list_transactions(
        self,
        state_filters: Iterable[str],
        producer_id_filters: Iterable[int],
        duration_filter_ms: int,
        now_ms: int,
    ) -> ListTransactionsResult:
        """ListTransactions: all non-Dead ids matching every given filter (empty filter = any); the
        duration filter (-1 = none) keeps transactions running longer than it, as Kafka does."""
        states: set[TransactionState] = set()
        unknown: list[str] = []
        state_names = list(state_filters)
        for name in state_names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pids = set(producer_id_filters)
        listed = []
        for m in self.all_metadata():
            if m.state is TransactionState.DEAD:
                continue
            if pids and m.producer_id not in pids:
                continue
            if state_names and m.state not in states:
                continue
            if duration_filter_ms >= 0 and now_ms - m.txn_start_timestamp <= duration_filter_ms:
                continue
            listed.append(ListedTransaction(m.transactional_id, m.producer_id, m.state.kafka_name))
        return ListTransactionsResult(listed, unknown)
