"""EndTxn's decision: which transition to make, or which answer to give without one.

Kept apart from the coordinator because the rules differ by transaction version and are the heart
of exactly-once: a stale or delayed EndTxn must never commit or abort a later transaction.

Transaction version 1 (EndTxn v0-v4): the epoch must equal the current one; a retry after the
transaction completed is recognised by the state alone (CompleteCommit + commit -> success).

Transaction version 2 (KIP-890 part 2, EndTxn v5+): every EndTxn bumps the epoch, so a retry carries
the epoch one below the current one and "same epoch" means a new request. Kafka's table for the idle
states ("retry" = epoch current-1, "current" = epoch current; PF = PRODUCER_FENCED, ITS =
INVALID_TXN_STATE, OK = success without a write, EB = write an abort with an epoch bump):

    state           abort retry  abort current  commit retry  commit current
    Empty           PF           EB             PF            ITS
    CompleteAbort   OK           EB             ITS           ITS
    CompleteCommit  ITS          EB             OK            ITS

So a delayed EndTxn from transaction N arriving during transaction N+1 (state Ongoing, epoch one
higher) is PRODUCER_FENCED, and one arriving after N completed is a harmless retry (KAFKA-17754).
"""

from __future__ import annotations

from typing import Protocol

from onceflow.broker.txn.errors import IllegalTxnTransition
from onceflow.broker.txn.metadata import (
    COMPLETE_STATES,
    MAX_EPOCH,
    PREPARE_STATES,
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
    TxnTransition,
    supports_epoch_bump,
)
from onceflow.protocol.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTxnState,
    ProducerFenced,
)
from onceflow.protocol.records import NO_PRODUCER_ID

S = TransactionState


class _ProducerIdSource(Protocol):
    def generate_producer_id(self) -> int: ...


def decide_end_txn(
    metadata: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    transaction_version: int,
    producer_ids: _ProducerIdSource,
    now_ms: int,
) -> TxnTransition | ProducerIdAndEpoch:
    """A prepared PrepareCommit/PrepareAbort transition to append, or the answer to a retry of an
    EndTxn that already completed; raises the Kafka error otherwise."""
    if supports_epoch_bump(transaction_version):
        return _decide_v2(
            metadata, producer_id, producer_epoch, commit, transaction_version, producer_ids, now_ms
        )
    return _decide_v1(metadata, producer_id, producer_epoch, commit, transaction_version, now_ms)


def _decide_v1(
    metadata: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool, tv: int, now_ms: int
) -> TxnTransition | ProducerIdAndEpoch:
    tid = metadata.transactional_id
    if metadata.producer_id != producer_id:
        raise InvalidProducerIdMapping(
            f"producer id {producer_id} is not the one of transactional id {tid!r}"
        )
    if producer_epoch != metadata.producer_epoch:
        raise ProducerFenced(
            f"transactional id {tid!r}: epoch {producer_epoch} is not the current {metadata.producer_epoch}"
        )
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactions(f"transactional id {tid!r} is changing state")
    state = metadata.state
    if state is S.ONGOING:
        return metadata.prepare_abort_or_commit(commit, tv, NO_PRODUCER_ID, now_ms)
    if state in COMPLETE_STATES:
        if (state is S.COMPLETE_COMMIT) == commit:
            return _current(metadata)  # the retry of an EndTxn that completed
        raise _invalid_state(metadata, commit)
    if state in PREPARE_STATES:
        if (state is S.PREPARE_COMMIT) == commit:
            raise ConcurrentTransactions(f"transactional id {tid!r} is completing this transaction")
        raise _invalid_state(metadata, commit)
    if state is S.EMPTY:
        raise _invalid_state(metadata, commit)
    raise IllegalTxnTransition(
        tid, state, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, "found in a transient state"
    )


def _decide_v2(
    metadata: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    tv: int,
    producer_ids: _ProducerIdSource,
    now_ms: int,
) -> TxnTransition | ProducerIdAndEpoch:
    tid = metadata.transactional_id
    state = metadata.state
    # A retry of an EndTxn that rotated the producer id (its epoch was exhausted).
    retry_on_overflow = (
        metadata.previous_producer_id == producer_id
        and producer_epoch == MAX_EPOCH - 1
        and metadata.producer_epoch == 0
    )
    # A retry of an EndTxn whose epoch bump is already stored.
    retry_on_bump = metadata.producer_epoch == producer_epoch + 1
    if metadata.producer_id != producer_id and not retry_on_overflow:
        raise InvalidProducerIdMapping(
            f"producer id {producer_id} is not the one of transactional id {tid!r}"
        )
    # Pending first (KAFKA-18464): an abort racing the completion of a commit must wait, not be fenced.
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactions(f"transactional id {tid!r} is changing state")
    if state in (S.ONGOING, S.EMPTY):
        valid_epoch = producer_epoch == metadata.producer_epoch
    elif state in PREPARE_STATES:
        valid_epoch = retry_on_bump
    elif state in COMPLETE_STATES:
        valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == metadata.producer_epoch
    else:
        raise IllegalTxnTransition(
            tid, state, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, "found in a transient state"
        )
    if not valid_epoch:
        raise ProducerFenced(
            f"transactional id {tid!r}: epoch {producer_epoch} is stale (current {metadata.producer_epoch})"
        )
    is_retry = retry_on_bump or retry_on_overflow

    if state is S.ONGOING:
        return _prepare_end(metadata, commit, tv, producer_ids, now_ms)
    if state in PREPARE_STATES:
        if (state is S.PREPARE_COMMIT) == commit:
            raise ConcurrentTransactions(f"transactional id {tid!r} is completing this transaction")
        raise _invalid_state(metadata, commit)
    if state is S.EMPTY:
        if commit:
            raise _invalid_state(metadata, commit)
        return _prepare_end(metadata, False, tv, producer_ids, now_ms)
    # CompleteCommit / CompleteAbort
    same_outcome = (state is S.COMPLETE_COMMIT) == commit
    if is_retry:
        if same_outcome:
            return _current(metadata)
        raise _invalid_state(metadata, commit)
    if commit:
        raise _invalid_state(metadata, commit)
    return _prepare_end(metadata, False, tv, producer_ids, now_ms)  # an abort with nothing added


def _prepare_end(
    metadata: TransactionMetadata, commit: bool, tv: int, producer_ids: _ProducerIdSource, now_ms: int
) -> TxnTransition:
    # The bump would reach MAX_EPOCH, which no client may hold: pick the next producer id now; it
    # takes over (at epoch 0) when the transaction completes.
    next_id = producer_ids.generate_producer_id() if metadata.is_producer_epoch_exhausted else NO_PRODUCER_ID
    return metadata.prepare_abort_or_commit(commit, tv, next_id, now_ms)


def _current(metadata: TransactionMetadata) -> ProducerIdAndEpoch:
    return ProducerIdAndEpoch(metadata.producer_id, metadata.producer_epoch)


def _invalid_state(metadata: TransactionMetadata, commit: bool) -> InvalidTxnState:
    return InvalidTxnState(
        f"transactional id {metadata.transactional_id!r} is {metadata.state.kafka_name}; "
        f"cannot {'commit' if commit else 'abort'}"
    )
