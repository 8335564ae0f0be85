"""The transaction coordinator: state machine, ``__transaction_state`` format, producer ids.

Socket-free and event-loop-free: the broker injects a log writer and a marker writer (see
``state_manager.TransactionLogWriter`` and ``markers.MarkerWriter``) and calls the coordinator's
async methods from its handlers.
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
from onceflow.broker.txn.state_manager import TransactionLogWriter

__all__ = [
    "MarkerWriter",
    "ProducerIdAndEpoch",
    "ProducerIdManager",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionLogWriter",
    "TransactionMetadata",
    "TransactionState",
    "TxnMarker",
    "TxnTransition",
]
