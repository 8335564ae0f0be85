"""The producer's transaction state machine, sans IO: a table of moves, no sockets, no event loop.

``TRANSITIONS[(state, event)]`` is the next state; any pair missing from the table raises
:class:`IllegalTransactionStateError` naming both, so misuse (commit before begin, begin twice) is
refused before anything is sent. The states are Kafka's (``TransactionManager.State``):

    UNINITIALIZED -INIT-> INITIALIZING -INITIALIZED-> READY -BEGIN-> IN_TRANSACTION
    IN_TRANSACTION -COMMIT-> COMMITTING_TRANSACTION -ENDED-> READY
    IN_TRANSACTION / ABORTABLE_ERROR -ABORT-> ABORTING_TRANSACTION -ENDED-> READY
    ABORTING_TRANSACTION -BUMP_EPOCH-> INITIALIZING   (KIP-360: the epoch is bumped after an abort
                                                       caused by a lost or unknown sequence)
    any of IN_TRANSACTION, COMMITTING_TRANSACTION, INITIALIZING, ABORTABLE_ERROR -FAIL_ABORTABLE->
        ABORTABLE_ERROR
    any state -FAIL_FATAL-> FATAL_ERROR

Two-phase commit (KIP-939, ``transaction.two.phase.commit.enable``) adds Kafka's PREPARED_TRANSACTION:

    IN_TRANSACTION -PREPARE-> PREPARED_TRANSACTION          (prepare_transaction: records flushed)
    INITIALIZING -INITIALIZED_PREPARED-> PREPARED_TRANSACTION (init_transactions(keep_prepared_txn=True)
                                                              found a prepared transaction)
    PREPARED_TRANSACTION -COMMIT / -ABORT-> COMMITTING_TRANSACTION / ABORTING_TRANSACTION

Nothing can be sent in PREPARED_TRANSACTION, and no transaction begins: the transaction waits for
its external coordinator's decision (complete_transaction, or commit/abort).

Besides the state it keeps the transaction's bookkeeping: the producer id and epoch, the partitions
already added on the coordinator (AddPartitionsToTxn) and those waiting to be added, and why the
transaction can no longer commit.

Transaction protocol v2 (KIP-890 part 2) is chosen per transaction, at begin_transaction(), from the
cluster's finalized ``transaction.version`` (>= 2), and kept until the transaction ends, as Kafka's
client does, so a feature change never switches protocols mid-transaction. Under v2 a partition
counts as added as soon as a record goes to it (Produce v12 adds it on the broker), and EndTxn v5
answers the producer id and epoch of the next transaction (the epoch goes up by one every time).
"""

from __future__ import annotations

import enum

from onceflow.client.producer.errors import (
    FatalProducerError,
    IllegalTransactionStateError,
    TransactionAbortableError,
)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TxnEvent(enum.Enum):
    INIT = "init_transactions"
    INITIALIZED = "producer id received"
    INITIALIZED_PREPARED = "prepared transaction kept"
    PREPARE = "prepare_transaction"
    BEGIN = "begin_transaction"
    COMMIT = "commit_transaction"
    ABORT = "abort_transaction"
    ENDED = "EndTxn completed"
    BUMP_EPOCH = "epoch bump"
    FAIL_ABORTABLE = "abortable error"
    FAIL_FATAL = "fatal error"


S, E = TxnState, TxnEvent
TRANSITIONS: dict[tuple[TxnState, TxnEvent], TxnState] = {
    (S.UNINITIALIZED, E.INIT): S.INITIALIZING,
    (S.INITIALIZING, E.INITIALIZED): S.READY,
    (S.READY, E.BEGIN): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, E.COMMIT): S.COMMITTING_TRANSACTION,
    (S.IN_TRANSACTION, E.ABORT): S.ABORTING_TRANSACTION,
    (S.IN_TRANSACTION, E.PREPARE): S.PREPARED_TRANSACTION,
    (S.INITIALIZING, E.INITIALIZED_PREPARED): S.PREPARED_TRANSACTION,
    (S.PREPARED_TRANSACTION, E.COMMIT): S.COMMITTING_TRANSACTION,
    (S.PREPARED_TRANSACTION, E.ABORT): S.ABORTING_TRANSACTION,
    (S.ABORTABLE_ERROR, E.ABORT): S.ABORTING_TRANSACTION,
    (S.COMMITTING_TRANSACTION, E.ENDED): S.READY,
    (S.ABORTING_TRANSACTION, E.ENDED): S.READY,
    (S.ABORTING_TRANSACTION, E.BUMP_EPOCH): S.INITIALIZING,
    (S.IN_TRANSACTION, E.FAIL_ABORTABLE): S.ABORTABLE_ERROR,
    (S.COMMITTING_TRANSACTION, E.FAIL_ABORTABLE): S.ABORTABLE_ERROR,
    (S.INITIALIZING, E.FAIL_ABORTABLE): S.ABORTABLE_ERROR,
    (S.ABORTABLE_ERROR, E.FAIL_ABORTABLE): S.ABORTABLE_ERROR,
    **{(state, E.FAIL_FATAL): S.FATAL_ERROR for state in TxnState},
}
del S, E

# What to tell a user who called something at the wrong time.
_HINTS = {
    TxnState.UNINITIALIZED: "call init_transactions() first",
    TxnState.READY: "call begin_transaction() first",
    TxnState.IN_TRANSACTION: "commit_transaction() or abort_transaction() the open transaction first",
    TxnState.ABORTABLE_ERROR: "the transaction failed: call abort_transaction()",
    TxnState.FATAL_ERROR: "the producer hit a fatal error: close it",
    TxnState.PREPARED_TRANSACTION: "the transaction is prepared: complete_transaction() it",
}


class TransactionManager:
    """State, producer id/epoch and partitions of one transactional producer. No I/O."""

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int = 60000) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.added: set[tuple[str, int]] = set()  # on the coordinator for this transaction
        self.pending: set[tuple[str, int]] = set()  # sent to, not yet added
        self.last_error: BaseException | None = None
        self.epoch_bump_required = False  # KIP-360: bump after the abort
        self.started_on_coordinator = False  # partitions or offsets were added: EndTxn is needed
        self.transaction_v2 = False  # this transaction uses the transaction protocol v2 (KIP-890)
        # KIP-939: the producer id and epoch that wrote the prepared transaction, while one is.
        self.prepared: tuple[int, int] | None = None

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    def transition(self, event: TxnEvent, error: BaseException | None = None) -> TxnState:
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            hint = _HINTS.get(self.state, "wait for the running operation to finish")
            raise IllegalTransactionStateError(
                f"cannot {event.value} in transaction state {self.state.value}: {hint}"
            )
        if event in (TxnEvent.FAIL_ABORTABLE, TxnEvent.FAIL_FATAL):
            self.last_error = error
        elif event in (TxnEvent.ENDED, TxnEvent.BEGIN):
            self.last_error = None
        if event in (TxnEvent.ENDED, TxnEvent.INITIALIZED):
            self.prepared = None
            self.added.clear()
            self.pending.clear()
            self.started_on_coordinator = False
        self.state = new
        return new

    def set_producer(self, producer_id: int, epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, epoch
        self.epoch_bump_required = False

    # -- checks the producer makes before acting -------------------------------------------------

    def check_can_send(self) -> None:
        """Raise unless a transactional send is allowed now (idempotent producers always may)."""
        if not self.is_transactional or self.state is TxnState.IN_TRANSACTION:
            return
        self._raise_for_state("send")

    def check_not_failed(self, what: str) -> None:
        if self.state is TxnState.FATAL_ERROR or self.state is TxnState.ABORTABLE_ERROR:
            self._raise_for_state(what)

    def _raise_for_state(self, what: str) -> None:
        if self.state is TxnState.FATAL_ERROR:
            if isinstance(self.last_error, FatalProducerError):
                raise self.last_error
            raise FatalProducerError(
                f"cannot {what}: the producer failed fatally ({self.last_error}); close it"
            )
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"cannot {what}: the transaction failed ({self.last_error}); call abort_transaction()"
            )
        hint = _HINTS.get(self.state, "wait for the running operation to finish")
        raise IllegalTransactionStateError(f"cannot {what} in transaction state {self.state.value}: {hint}")

    # -- partitions in the transaction -------------------------------------------------------------

    def latch_transaction_version(self, finalized_level: int) -> None:
        """Fix the protocol of the next transaction from the cluster's ``transaction.version``."""
        self.transaction_v2 = finalized_level >= 2

    def maybe_add_partition(self, tp: tuple[str, int]) -> None:
        if not self.is_transactional or tp in self.added:
            return
        if self.transaction_v2:
            # Produce v12 adds it on the broker: nothing to send first, but EndTxn is now needed.
            self.added.add(tp)
            self.started_on_coordinator = True
        else:
            self.pending.add(tp)

    def is_partition_added(self, tp: tuple[str, int]) -> bool:
        return not self.is_transactional or tp in self.added

    def partitions_to_add(self) -> list[tuple[str, int]]:
        return sorted(self.pending - self.added)

    def partitions_added(self, partitions: list[tuple[str, int]]) -> None:
        self.added.update(partitions)
        self.pending.difference_update(partitions)
        self.started_on_coordinator = True
