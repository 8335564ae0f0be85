"""onceflow's producer: idempotent by default, transactional with a transactional.id.

:class:`AsyncProducer` (asyncio) and :class:`Producer` (blocking, for scripts and Spark executors), both
configured by :class:`ProducerConfig` (Kafka's names and defaults). Modules: ``config``,
``partitioners``, ``accumulator`` and ``batch`` (batching), ``sender`` (in-flight requests, sequence
numbers, retries, KIP-360), ``transaction_manager`` (the transaction state machine, sans IO),
``txn_requests`` (coordinator APIs), ``network`` (metadata, connections, coordinators), ``faults``
(client-side fault points), ``errors`` (what users catch), ``prepared_txn_state`` (KIP-939's
``PreparedTxnState``).
"""

from onceflow.client.producer.batch import RecordFuture, RecordMetadata
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.errors import (
    BufferExhaustedError,
    DeliveryTimeoutError,
    FatalProducerError,
    GroupRebalancedCommitError,
    IllegalTransactionStateError,
    ProducerError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from onceflow.client.producer.faults import ClientFaults
from onceflow.client.producer.prepared_txn_state import PreparedTxnState
from onceflow.client.producer.producer import AsyncProducer, ConsumerGroupMetadata
from onceflow.client.producer.sync import Producer

__all__ = [
    "AsyncProducer",
    "BufferExhaustedError",
    "ClientFaults",
    "ConsumerGroupMetadata",
    "DeliveryTimeoutError",
    "FatalProducerError",
    "GroupRebalancedCommitError",
    "IllegalTransactionStateError",
    "PreparedTxnState",
    "Producer",
    "ProducerConfig",
    "ProducerError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "RecordFuture",
    "RecordMetadata",
    "TransactionAbortableError",
    "TransactionAbortedError",
]
