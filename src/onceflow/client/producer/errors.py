"""Errors a producer user sees, named for what to do about them (Kafka's classification).

- :class:`ProducerFencedError`, :class:`TransactionalIdAuthorizationError` (fatal): another producer
  owns the transactional.id now, or we may not use it. Close this producer; nothing it does can
  succeed any more.
- :class:`TransactionAbortableError`: the current transaction cannot commit. Call
  ``abort_transaction()`` and start again; the producer stays usable.
- Retriable errors (``KafkaError.retriable``) are retried inside the producer until
  ``delivery.timeout.ms``; a user sees them only as :class:`DeliveryTimeoutError`.
- :class:`IllegalTransactionStateError`: the API was called out of order (e.g. commit before begin).
- :class:`RecordTooLargeError`: the record can never be written as it is (larger than max.request.size
  or buffer.memory, or than the topic's max.message.bytes on its own). As in Kafka, send() does not
  raise it: it is the error of the record's future and callback.
"""

from __future__ import annotations

from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError


class ProducerError(KafkaError):
    """Base of the producer's own errors."""


class FatalProducerError(ProducerError):
    """The producer can do nothing more: close it (and, for fencing, stop this application instance)."""


class ProducerFencedError(FatalProducerError):
    """A newer producer with the same transactional.id called init_transactions: this one is a zombie.
    Close it; the newer instance owns the transactional.id."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdAuthorizationError(FatalProducerError):
    """The broker refuses this transactional.id to this client: fix the ACLs, then start a new producer."""

    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class TransactionAbortableError(ProducerError):
    """The current transaction failed and cannot commit: call abort_transaction(), then retry the work."""

    code = ErrorCode.TRANSACTION_ABORTABLE


class GroupRebalancedCommitError(TransactionAbortableError):
    """send_offsets_to_transaction was refused by the group coordinator (KIP-447) because the consumer
    whose ``group_metadata()`` was passed is no longer the member that owns those partitions: its
    generation is old (ILLEGAL_GENERATION), it left the group (UNKNOWN_MEMBER_ID), or another instance
    took its group.instance.id (FENCED_INSTANCE_ID). Java names this CommitFailedException. Abort the
    transaction, then poll the consumer (it rejoins) and continue from the new assignment's committed
    offsets. ``code`` is the coordinator's answer."""

    code = ErrorCode.ILLEGAL_GENERATION


class IllegalTransactionStateError(ProducerError):
    """A transactional call was made in a state that does not allow it (the message names both)."""

    code = ErrorCode.INVALID_TXN_STATE


class RecordTooLargeError(ProducerError):
    """The record is too large to be written (Kafka's RecordTooLargeException). Either send() refused
    it before queueing it, because its serialized size exceeds max.request.size or buffer.memory, or
    the broker refused it alone in a batch as above the topic's max.message.bytes. It is the error of
    the record's future and callback, not raised by send(); in a transaction the transaction fails
    (abort it). Raise the setting named in the message or send smaller records."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class DeliveryTimeoutError(ProducerError):
    """A batch was not acknowledged within delivery.timeout.ms (retries included)."""

    code = ErrorCode.REQUEST_TIMED_OUT


class BufferExhaustedError(ProducerError):
    """buffer.memory stayed full for max.block.ms: the broker is slower than the application sends."""

    code = ErrorCode.REQUEST_TIMED_OUT


class TransactionAbortedError(ProducerError):
    """The record was in a transaction that was aborted before it was sent; it was never written."""

    code = ErrorCode.TRANSACTION_ABORTABLE


class ProducerClosedError(ProducerError):
    """send() after close(), or the record was still queued when close() gave up waiting."""

    code = ErrorCode.NETWORK_EXCEPTION


# Wire codes after which no request of this producer can succeed (Kafka: fatal errors).
FATAL_CODES = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,  # transactional: another instance bumped the epoch
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    }
)
# Codes that make the coordinator we talk to the wrong one: look it up again and retry.
COORDINATOR_CODES = COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def fatal_error_for(code: ErrorCode, what: str) -> FatalProducerError:
    """The user-facing fatal error for a wire ``code`` met while doing ``what``."""
    if code in (
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    ):
        return ProducerFencedError(
            f"{what}: {code.name}: a newer producer with the same transactional.id has taken over; "
            "close this producer"
        )
    if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return TransactionalIdAuthorizationError(f"{what}: not authorized to use this transactional.id")
    return FatalProducerError(f"{what}: {code.name}; close this producer", code)
