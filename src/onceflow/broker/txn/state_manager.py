"""The coordinator's cache of transactional ids and its link to ``__transaction_state``.

Owns: the map transactional id -> :class:`TransactionMetadata`, the loading status (requests get
COORDINATOR_LOAD_IN_PROGRESS until the log is replayed, NOT_COORDINATOR after unloading), the append
of a prepared transition followed by its completion, replay of the log on load, and the queries
behind timeouts, expiry, ListTransactions and DescribeTransactions.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from onceflow.broker.txn.config import TransactionConfig, partition_for_key
from onceflow.broker.txn.errors import CoordinatorNotAvailable, InvalidTransactionTimeout
from onceflow.broker.txn.log_format import decode_key, decode_value, encode_key, encode_value_fields
from onceflow.broker.txn.metadata import TransactionMetadata, TransactionState, TxnTransition
from onceflow.protocol.errors import (
    CoordinatorLoadInProgress,
    ErrorCode,
    KafkaError,
    NotCoordinator,
    error_code_for,
)

log = logging.getLogger(__name__)


class TransactionLogWriter(Protocol):
    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Append one record to ``__transaction_state``-``partition`` and return once it is durable
        (acks=-1, no compression, as Kafka enforces). ``value`` None is a tombstone. Raise a
        :class:`KafkaError` on failure."""
        ...


class CoordinatorStatus(enum.Enum):
    LOADING = "loading"  # requests answer COORDINATOR_LOAD_IN_PROGRESS
    ACTIVE = "active"
    INACTIVE = "inactive"  # never loaded or unloaded: NOT_COORDINATOR


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


def _append_error(exc: BaseException) -> KafkaError:
    """Kafka's mapping of a failed ``__transaction_state`` append to what the client is told."""
    code = error_code_for(exc)
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return CoordinatorNotAvailable(f"__transaction_state append failed: {exc}")
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return NotCoordinator(f"__transaction_state append failed: {exc}")
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return KafkaError(f"__transaction_state append failed: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)
    if isinstance(exc, KafkaError):
        return exc
    return KafkaError(f"__transaction_state append failed: {exc!r}", ErrorCode.UNKNOWN_SERVER_ERROR)


def _encoded_value(transition: TxnTransition) -> bytes:
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


class TransactionStateManager:
    def __init__(self, config: TransactionConfig, log_writer: TransactionLogWriter) -> None:
        self.config = config
        self._writer = log_writer
        self._cache: dict[str, TransactionMetadata] = {}
        self._status = CoordinatorStatus.INACTIVE
        self._coordinator_epoch = -1

    # -- status --------------------------------------------------------------------------------------

    @property
    def status(self) -> CoordinatorStatus:
        return self._status

    @property
    def coordinator_epoch(self) -> int:
        return self._coordinator_epoch

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_key(transactional_id, self.config.transaction_state_log_num_partitions)

    def check_active(self) -> None:
        if self._status is CoordinatorStatus.LOADING:
            raise CoordinatorLoadInProgress("the transaction coordinator is loading __transaction_state")
        if self._status is CoordinatorStatus.INACTIVE:
            raise NotCoordinator("this broker is not (or no longer) the transaction coordinator")

    def begin_loading(self, coordinator_epoch: int) -> None:
        self._status = CoordinatorStatus.LOADING
        self._coordinator_epoch = coordinator_epoch
        self._cache.clear()

    def load_from_records(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay ``(key, value)`` records of ``__transaction_state`` in log order: the last record of an
        id wins and a tombstone removes it. Call :meth:`begin_loading` first; this activates."""
        if self._status is not CoordinatorStatus.LOADING:
            raise RuntimeError("load_from_records without begin_loading")
        loaded: dict[str, TransactionMetadata] = {}
        for key, value in records:
            transactional_id = decode_key(key)
            decoded = decode_value(value)
            if decoded is None:
                loaded.pop(transactional_id, None)
            else:
                loaded[transactional_id] = TransactionMetadata.from_log_value(transactional_id, decoded)
        self._cache = loaded
        self._status = CoordinatorStatus.ACTIVE
        log.info("loaded %d transactional ids from __transaction_state", len(loaded))

    def unload(self) -> None:
        self._cache.clear()
        self._status = CoordinatorStatus.INACTIVE

    # -- cache ---------------------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        self.check_active()
        return self._cache.get(transactional_id)

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        self.check_active()
        return self._cache.setdefault(metadata.transactional_id, metadata)

    def all_metadata(self) -> Iterator[TransactionMetadata]:
        self.check_active()
        return iter(list(self._cache.values()))

    def validate_transaction_timeout(self, txn_timeout_ms: int) -> None:
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms {txn_timeout_ms} is not in (0, {self.config.transaction_max_timeout_ms}] "
                "(transaction.max.timeout.ms)"
            )

    # -- the two-phase write -------------------------------------------------------------------------

    async def append_transition(self, metadata: TransactionMetadata, transition: TxnTransition) -> None:
        """Append ``transition`` for ``metadata``'s id, then apply it; on failure drop it and raise.

        A Dead transition appends a tombstone and removes the id from the cache instead.
        """
        epoch = self._coordinator_epoch
        transactional_id = metadata.transactional_id
        value = None if transition.state is TransactionState.DEAD else _encoded_value(transition)
        try:
            await self._writer.append(
                self.partition_for(transactional_id), encode_key(transactional_id), value
            )
        except Exception as exc:
            metadata.abort_transition(transition)
            log.info(
                "transactional id %r: append of %s failed: %s",
                transactional_id,
                transition.state.kafka_name,
                exc,
            )
            raise _append_error(exc) from exc
        if self._status is not CoordinatorStatus.ACTIVE or epoch != self._coordinator_epoch:
            # Unloaded (or reloaded) while we waited: the new owner has replayed the log; leave it alone.
            raise NotCoordinator(
                f"coordinator epoch moved from {epoch} while appending for {transactional_id!r}"
            )
        if self._cache.get(transactional_id) is not metadata:
            raise NotCoordinator(f"transactional id {transactional_id!r} left the cache while appending")
        if transition.state is TransactionState.DEAD:
            metadata.complete_transition(transition)
            del self._cache[transactional_id]
        else:
            metadata.complete_transition(transition)

    # -- queries -------------------------------------------------------------------------------------

    def timed_out_transactions(self, now_ms: int) -> list[TimedOutTransaction]:
        """Ongoing transactions older than their timeout and not already being changed."""
        return [
            TimedOutTransaction(m.transactional_id, m.producer_id, m.producer_epoch)
            for m in self.all_metadata()
            if not m.pending_transition_in_progress
            and m.state is TransactionState.ONGOING
            and m.txn_start_timestamp + m.txn_timeout_ms < now_ms
        ]

    def expirable_metadata(self, now_ms: int) -> list[TransactionMetadata]:
        """Idle ids (Empty/Complete*) untouched for ``transactional.id.expiration.ms``."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        return [
            m
            for m in self.all_metadata()
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
        self.check_active()
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
