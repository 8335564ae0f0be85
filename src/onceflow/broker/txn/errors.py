"""Errors of the transaction coordinator, each carrying its Kafka wire code.

The coordinator raises the shared classes from :mod:`onceflow.protocol.errors` (``ProducerFenced``,
``InvalidTxnState``, ``CoordinatorNotAvailable``, ...), re-exported here for its modules; defined here
are :class:`ProducerIdsExhausted` and :class:`IllegalTxnTransition`, coordinator conditions rather
than bad input, and :class:`TwoPhaseCommitNotAllowed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.protocol.errors import (  # noqa: F401 - re-exported for the coordinator's modules
    CoordinatorNotAvailable,
    ErrorCode,
    InvalidTransactionTimeout,
    KafkaError,
    TransactionAbortable,
    TransactionalIdNotFound,
)

if TYPE_CHECKING:
    from onceflow.broker.txn.metadata import TransactionState


class ProducerIdsExhausted(KafkaError):
    """Every producer id up to the configured maximum was handed out; nothing safe is left to give."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class TwoPhaseCommitNotAllowed(KafkaError):
    """A producer asked for two-phase commit (KIP-939) and the broker's
    ``transaction.two.phase.commit.enable`` is false. Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    the same answer as a missing permission, so that a client cannot tell the switch from an ACL."""

    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class IllegalTxnTransition(KafkaError):
    """The coordinator tried a move the state table does not allow (a bug, not a client error)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(
        self, transactional_id: str, current: TransactionState, target: TransactionState, why: str = ""
    ) -> None:
        self.current = current
        self.target = target
        reason = f": {why}" if why else ""
        super().__init__(
            f"transactional id {transactional_id!r}: illegal transition from {current.kafka_name} "
            f"to {target.kafka_name}{reason}"
        )


# API versions from which Kafka answers a stale epoch with PRODUCER_FENCED (KIP-588); older versions of
# the same API get INVALID_PRODUCER_EPOCH, which old clients understand.
_PRODUCER_FENCED_SINCE = {
    22: 4,  # InitProducerId
    24: 2,  # AddPartitionsToTxn
    25: 2,  # AddOffsetsToTxn
    26: 2,  # EndTxn
    28: 3,  # TxnOffsetCommit
}


def fenced_error_code(api_key: int, api_version: int) -> ErrorCode:
    """The code a handler puts on the wire for a fenced producer, per API and version."""
    since = _PRODUCER_FENCED_SINCE.get(api_key)
    if since is not None and api_version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.PRODUCER_FENCED


def wire_code(exc: BaseException, api_key: int, api_version: int) -> ErrorCode:
    """:func:`onceflow.protocol.errors.error_code_for`, with PRODUCER_FENCED downgraded for old versions."""
    from onceflow.protocol.errors import error_code_for

    code = error_code_for(exc)
    if code == ErrorCode.PRODUCER_FENCED:
        return fenced_error_code(api_key, api_version)
    return code
