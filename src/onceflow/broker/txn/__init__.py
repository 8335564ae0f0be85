"""The transaction coordinator: state machine, ``__transaction_state`` format, producer ids.

Socket-free and event-loop-free: the coordinator runs on the coordinator runtime
(:mod:`onceflow.broker.coordinator`), over the internal-topic writer the broker injects
(``coordinator.writer.PartitionWriter``), and writes markers through an injected
``markers.MarkerWriter``; the broker calls the coordinator's async methods from its handlers.
"""

from onceflow.broker.txn.config import TransactionConfig
from onceflow.broker.txn.coordinator import TransactionCoordinator, TransactionDescription
from onceflow.broker.txn.markers import MarkerWriter, TxnMarker
from onceflow.broker.txn.metadata import (
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
    TxnTransition,
)
from onceflow.broker.txn.pid_manager import ProducerIdManager

__all__ = [
    "MarkerWriter",
    "ProducerIdAndEpoch",
    "ProducerIdManager",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionMetadata",
    "TransactionState",
    "TxnMarker",
    "TxnTransition",
]
