"""One transactional id's state at the coordinator, and the state machine that moves it.

Rule 1: every legal move is in :data:`VALID_PREVIOUS_STATES` (Kafka's ``validPreviousStates``, as of
KIP-890 part 2); any other move raises :class:`IllegalTxnTransition` naming both states.

Rule 2: nothing changes a :class:`TransactionMetadata` from outside. A change is two-phase, as in
Kafka: a ``prepare_*`` method checks the move and returns a frozen :class:`TxnTransition` (and marks
it pending, so a second change can't start meanwhile); the coordinator runtime appends the
transition's record to ``__transaction_state`` and replays it, and the replay (the one loading uses)
applies it with :meth:`TransactionMetadata.complete_transition`. If the append fails,
:meth:`TransactionMetadata.abort_transition` drops it. A transition is also pending while its
transaction's markers are written (Kafka's pending state): other requests then wait.

Epoch rules the coordinator relies on: epochs are int16 and a client may never be given 32767
(``MAX_EPOCH``), so that the coordinator can always fence one more time; an epoch >= 32766 is
"exhausted" and the next bump needs a new producer id.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import NamedTuple

from onceflow.broker.txn.errors import IllegalTxnTransition
from onceflow.broker.txn.log_format import TopicPartition, TransactionLogValue
from onceflow.protocol.records import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID

log = logging.getLogger(__name__)

MAX_EPOCH = MAX_PRODUCER_EPOCH

# Kafka's transaction versions (the ``transaction.version`` feature): TV_2 is KIP-890 part 2, where
# every EndTxn bumps the epoch so that a late EndTxn can never touch the next transaction.
TV_0, TV_1, TV_2 = 0, 1, 2


def supports_epoch_bump(transaction_version: int) -> bool:
    return transaction_version >= TV_2


# A two-phase commit transaction (KIP-939) is stored as one whose timeout is the largest int32: as in
# Kafka, the flag needs no field of its own in ``__transaction_state`` and survives every reload.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


class TransactionState(enum.Enum):
    """Kafka's states; ``id`` is the status number in ``__transaction_state``, ``kafka_name`` the API name."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, kafka_name: str) -> None:
        # Plain attributes, not properties over ``value``: read on every transition.
        self.id = state_id
        self.kafka_name = kafka_name

    @property
    def expiration_allowed(self) -> bool:
        """Only idle ids may expire: never one with a transaction open or being completed."""
        return self in _EXPIRABLE

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        try:
            return _BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


S = TransactionState
_BY_ID = {s.id: s for s in S}
_BY_NAME = {s.kafka_name: s for s in S}
_EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

# target state -> the states it may be entered from. The one table of the state machine.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Empty and Complete* -> PrepareAbort only with TV_2: a client unsure of the server's state may abort.
    S.PREPARE_ABORT: frozenset(
        {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    ),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
COMPLETE_STATES = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

del S


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int


def is_valid_transition(current: TransactionState, target: TransactionState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


class TxnTransition(NamedTuple):
    """The complete next state of a transactional id: what gets appended, then applied.

    A named tuple (immutable, like a frozen dataclass): each transaction makes several, and
    ``_replace`` builds one several times faster than ``dataclasses.replace`` would.

    ``epoch_fence`` marks the abort the coordinator starts on its own (an InitProducerId that finds a
    transaction open, or a timeout): its epoch bump went through PrepareEpochFence. Kafka needs a
    ``hasFailedEpochFence`` flag because it raises the in-memory epoch before the append; we never
    do, so after a failed append the next fence bumps from the same epoch to the same value.
    """

    state: TransactionState
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int
    epoch_fence: bool = False

    def to_log_value(self) -> TransactionLogValue:
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.state.id,
            transaction_partitions=self.topic_partitions,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )


class TransactionMetadata:
    """A transactional id's current state plus at most one pending transition. Not thread-safe: the
    coordinator runs on one event loop and never awaits between a check and the ``prepare_*`` call."""

    __slots__ = ("transactional_id", "_current", "_pending", "_uncommitted")

    def __init__(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        previous_producer_id: int = NO_PRODUCER_ID,
        next_producer_id: int = NO_PRODUCER_ID,
        txn_timeout_ms: int,
        state: TransactionState = TransactionState.EMPTY,
        topic_partitions: frozenset[TopicPartition] = frozenset(),
        txn_start_timestamp: int = -1,
        txn_last_update_timestamp: int,
        client_transaction_version: int = TV_0,
    ) -> None:
        self.transactional_id = transactional_id
        self._current = TxnTransition(
            state=state,
            producer_id=producer_id,
            previous_producer_id=previous_producer_id,
            next_producer_id=next_producer_id,
            producer_epoch=producer_epoch,
            last_producer_epoch=last_producer_epoch,
            txn_timeout_ms=txn_timeout_ms,
            topic_partitions=frozenset(topic_partitions),
            txn_start_timestamp=txn_start_timestamp,
            txn_last_update_timestamp=txn_last_update_timestamp,
            client_transaction_version=client_transaction_version,
        )
        self._pending: TxnTransition | None = None
        self._uncommitted = 0  # applied writes whose records are not committed yet

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        # Kafka does not persist the last epoch; a retry of InitProducerId across a reload is fenced.
        return cls(
            transactional_id,
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            previous_producer_id=value.previous_producer_id,
            next_producer_id=value.next_producer_id,
            txn_timeout_ms=value.transaction_timeout_ms,
            state=TransactionState.from_id(value.transaction_status),
            topic_partitions=value.transaction_partitions,
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
            client_transaction_version=value.client_transaction_version,
        )

    # -- read-only view ------------------------------------------------------------------------------

    @property
    def current(self) -> TxnTransition:
        """The applied state as one frozen value."""
        return self._current

    @property
    def state(self) -> TransactionState:
        return self._current.state

    @property
    def producer_id(self) -> int:
        return self._current.producer_id

    @property
    def previous_producer_id(self) -> int:
        return self._current.previous_producer_id

    @property
    def next_producer_id(self) -> int:
        return self._current.next_producer_id

    @property
    def producer_epoch(self) -> int:
        return self._current.producer_epoch

    @property
    def last_producer_epoch(self) -> int:
        return self._current.last_producer_epoch

    @property
    def txn_timeout_ms(self) -> int:
        return self._current.txn_timeout_ms

    @property
    def topic_partitions(self) -> frozenset[TopicPartition]:
        return self._current.topic_partitions

    @property
    def txn_start_timestamp(self) -> int:
        return self._current.txn_start_timestamp

    @property
    def txn_last_update_timestamp(self) -> int:
        return self._current.txn_last_update_timestamp

    @property
    def client_transaction_version(self) -> int:
        return self._current.client_transaction_version

    @property
    def pending_state(self) -> TransactionState | None:
        return self._pending.state if self._pending is not None else None

    @property
    def pending_transition_in_progress(self) -> bool:
        """A change is under way: prepared and not yet appended, or applied and not yet committed
        (another request for the id must wait: CONCURRENT_TRANSACTIONS, as Kafka's pending state)."""
        return self._pending is not None or self._uncommitted > 0

    def awaiting_commit(self) -> None:
        """The last transition is applied; its record is not committed yet."""
        self._uncommitted += 1

    def committed(self) -> None:
        self._uncommitted = max(self._uncommitted - 1, 0)

    @property
    def pending_transition(self) -> TxnTransition | None:
        return self._pending

    @property
    def is_two_phase_commit(self) -> bool:
        """The id's producer asked for two-phase commit: its transactions never time out."""
        return self._current.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self._current.producer_epoch)

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, {self._current}, pending={self.pending_state})"
        )

    # -- the one checked path ------------------------------------------------------------------------

    def prepare_transition(self, target: TransactionState, **changes: object) -> TxnTransition:
        """Check ``current -> target`` against the table and mark the result pending.

        ``changes`` override fields of the current state; ``previous_producer_id`` follows Kafka: a
        transition that changes the producer id remembers the old one.
        """
        current = self._current
        if self._pending is not None:
            raise IllegalTxnTransition(
                self.transactional_id,
                current.state,
                target,
                f"a transition to {self._pending.state.kafka_name} is pending",
            )
        if not is_valid_transition(current.state, target):
            raise IllegalTxnTransition(self.transactional_id, current.state, target)
        new_pid = changes.get("producer_id", current.producer_id)
        if new_pid != current.producer_id and "previous_producer_id" not in changes:
            changes["previous_producer_id"] = current.producer_id
        transition = current._replace(state=target, **changes)
        if transition.producer_id < 0:
            raise IllegalTxnTransition(
                self.transactional_id, current.state, target, f"producer id {transition.producer_id}"
            )
        if target is not TransactionState.DEAD and not 0 <= transition.producer_epoch <= MAX_EPOCH:
            raise IllegalTxnTransition(
                self.transactional_id, current.state, target, f"epoch {transition.producer_epoch}"
            )
        log.debug(
            "transactional id %r prepares %s -> %s",
            self.transactional_id,
            current.state.kafka_name,
            target.kafka_name,
        )
        self._pending = transition
        return transition

    def complete_transition(self, transition: TxnTransition) -> None:
        """Apply ``transition`` after its record is in ``__transaction_state``; it must be the pending one."""
        current_state = self._current.state
        if self._pending is None:
            raise IllegalTxnTransition(
                self.transactional_id, current_state, transition.state, "nothing is pending"
            )
        if transition != self._pending:
            raise IllegalTxnTransition(
                self.transactional_id,
                current_state,
                transition.state,
                f"the pending transition is to {self._pending.state.kafka_name} with other values",
            )
        if transition.state is TransactionState.PREPARE_EPOCH_FENCE:
            # The fence is never persisted on its own: it is folded into the PrepareAbort that follows.
            raise IllegalTxnTransition(
                self.transactional_id, current_state, transition.state, "a fence is never persisted"
            )
        self._current = transition._replace(epoch_fence=False) if transition.epoch_fence else transition
        self._pending = None
        log.debug("transactional id %r is now %s", self.transactional_id, transition.state.kafka_name)

    def replace_with_log_value(self, value: TransactionLogValue) -> None:
        """Replay of a record this object did not prepare (another writer's, or an older one's): the
        state becomes the record's, as when loading; nothing stays pending."""
        loaded = TransactionMetadata.from_log_value(self.transactional_id, value)
        self._current = loaded._current
        self._pending = None

    def abort_transition(self, transition: TxnTransition) -> None:
        """Drop the pending ``transition`` because its append failed; the state stays as it was."""
        if self._pending is None or transition != self._pending:
            raise IllegalTxnTransition(
                self.transactional_id, self._current.state, transition.state, "not the pending one"
            )
        self._pending = None

    # -- the moves the coordinator makes -------------------------------------------------------------

    def prepare_incr_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransition:
        """InitProducerId on an idle id: bump the epoch (a retry with the last epoch gets the same one).

        Raises ProducerFenced when ``expected_epoch`` (KIP-360) is neither the current nor the last one.
        """
        from onceflow.protocol.errors import ProducerFenced

        current = self._current
        bumped = current.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
            epoch, last = bumped, current.producer_epoch
        elif expected_epoch == current.last_producer_epoch:
            epoch, last = (
                current.producer_epoch,
                current.last_producer_epoch,
            )  # a retry of a bump that succeeded
        else:
            raise ProducerFenced(
                f"transactional id {self.transactional_id!r}: epoch {expected_epoch} is neither the current "
                f"{current.producer_epoch} nor the last {current.last_producer_epoch}"
            )
        if epoch == bumped and self.is_producer_epoch_exhausted:
            raise IllegalTxnTransition(
                self.transactional_id,
                current.state,
                TransactionState.EMPTY,
                "epoch exhausted; rotate the producer id",
            )
        return self.prepare_transition(
            TransactionState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
            next_producer_id=NO_PRODUCER_ID,
        )

    def prepare_keep_prepared_txn(self, now_ms: int) -> TxnTransition:
        """InitProducerId with keepPreparedTxn (KIP-939) on an open two-phase commit transaction: the
        epoch goes up by one, which fences the producer that wrote it, and the transaction stays open
        with its partitions and start time, for the new producer to commit or abort."""
        if self.producer_epoch >= MAX_EPOCH - 1:
            raise IllegalTxnTransition(
                self.transactional_id, self.state, TransactionState.ONGOING, "epoch exhausted"
            )
        return self.prepare_transition(
            TransactionState.ONGOING,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=self.producer_epoch,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransition:
        """InitProducerId when the epoch is exhausted: a fresh producer id at epoch 0."""
        return self.prepare_transition(
            TransactionState.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
            next_producer_id=NO_PRODUCER_ID,
        )

    def prepare_add_partitions(
        self, partitions: frozenset[TopicPartition], now_ms: int, client_transaction_version: int
    ) -> TxnTransition:
        starts = self.state in (TransactionState.EMPTY, *COMPLETE_STATES)
        return self.prepare_transition(
            TransactionState.ONGOING,
            topic_partitions=self.topic_partitions | partitions,
            txn_start_timestamp=now_ms if starts else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(
        self, commit: bool, client_transaction_version: int, next_producer_id: int, now_ms: int
    ) -> TxnTransition:
        """EndTxn: PrepareCommit or PrepareAbort. With TV_2 the epoch goes up by one, and an abort may
        start from Empty/Complete* (nothing was added; the start time is then now)."""
        target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        nothing_added = self.state is not TransactionState.ONGOING
        if nothing_added and not supports_epoch_bump(client_transaction_version):
            raise IllegalTxnTransition(
                self.transactional_id, self.state, target, "only transaction version 2 ends an empty txn"
            )
        if supports_epoch_bump(client_transaction_version):
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        return self.prepare_transition(
            target,
            producer_epoch=epoch,
            last_producer_epoch=last,
            next_producer_id=next_producer_id,
            topic_partitions=frozenset() if nothing_added else self.topic_partitions,
            txn_start_timestamp=now_ms if nothing_added else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_fence_producer_epoch(self, now_ms: int) -> TxnTransition:
        """The coordinator aborts an open transaction itself, bumping the epoch so the old producer is
        fenced: Ongoing -> PrepareEpochFence -> PrepareAbort, prepared in one step (Kafka holds the
        fence only as a pending state between the two)."""
        if not is_valid_transition(self.state, TransactionState.PREPARE_EPOCH_FENCE):
            raise IllegalTxnTransition(
                self.transactional_id, self.state, TransactionState.PREPARE_EPOCH_FENCE
            )
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTxnTransition(
                self.transactional_id,
                self.state,
                TransactionState.PREPARE_EPOCH_FENCE,
                "epoch would overflow",
            )
        epoch = self.producer_epoch + 1
        # The second hop, PrepareEpochFence -> PrepareAbort, is checked by prepare_transition below
        # (Ongoing -> PrepareAbort is in the table as well).
        return self.prepare_transition(
            TransactionState.PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            next_producer_id=NO_PRODUCER_ID,
            txn_last_update_timestamp=now_ms,
            epoch_fence=True,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransition:
        """After the markers: CompleteCommit/CompleteAbort. With TV_2 and an exhausted epoch, the
        producer id picked at EndTxn takes over here at epoch 0."""
        target = (
            TransactionState.COMPLETE_COMMIT
            if self.state is TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        changes: dict[str, object] = {}
        if supports_epoch_bump(self.client_transaction_version) and self.next_producer_id != NO_PRODUCER_ID:
            changes = {"producer_id": self.next_producer_id, "producer_epoch": 0}
        return self.prepare_transition(
            target,
            next_producer_id=NO_PRODUCER_ID,
            topic_partitions=frozenset(),
            txn_last_update_timestamp=now_ms,
            **changes,
        )

    def prepare_dead(self) -> TxnTransition:
        """Expiry of an idle id: the tombstone is written, then the id leaves the cache."""
        return self.prepare_transition(TransactionState.DEAD, topic_partitions=frozenset())
