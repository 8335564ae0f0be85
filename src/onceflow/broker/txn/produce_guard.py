"""KIP-890 on the produce path: a transactional write must go to a partition of an open transaction.

Without this check, a producer whose transaction was aborted (timeout, fencing) could keep writing
and its late records would start a new "transaction" on the partition that no coordinator knows of,
holding the LSO back forever (a hanging transaction).

- Produce v3-11 (transaction protocol v0/v1 clients): before the first transactional batch of a
  producer on a partition (no transaction of that producer open there), ask the coordinator whether
  the partition is in the producer's transaction (``verify_partitions_in_txn``). If not, the batch is
  rejected with TRANSACTION_ABORTABLE (v11, whose clients abort and go on) or INVALID_TXN_STATE
  (v3-10, as Kafka answers clients that predate that error); coordinator states that may pass (a
  transaction being completed, a loading coordinator) answer NOT_ENOUGH_REPLICAS, which producers
  retry, as Kafka does for old clients; a stale epoch answers INVALID_PRODUCER_EPOCH.
- Produce v12+ (transaction protocol v2): the broker adds the partitions itself
  (``add_partitions_to_txn`` with TV_2, from the Produce handler) before appending, so clients send
  no AddPartitionsToTxn; on a cluster whose coordinator of the transactional id is another broker,
  through the node's ``txn_router`` (an AddPartitionsToTxn v5 to that broker).
- On a cluster, the v3-11 check is made only where this broker coordinates the transactional id (a
  remote verification would need an await before the append, which must stay in request order).
  The same translations apply, except that CONCURRENT_TRANSACTIONS is answered as it is: with TV_2
  it is the usual answer while the previous transaction's markers go out, and these clients retry
  it (Kafka's ReplicaManager makes the same exception for clients that support the epoch bump).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError
from onceflow.protocol.records import BatchHeader
from onceflow.protocol.transaction_versions import FIRST_ABORTABLE_PRODUCE_VERSION, FIRST_TV2_PRODUCE_VERSION

if TYPE_CHECKING:
    from onceflow.broker.topics import Partition
    from onceflow.broker.txn.service import TransactionService
    from onceflow.server.txn_router import TransactionRouter

# Coordinator answers a producer may not retry on a Produce; NOT_ENOUGH_REPLICAS makes every producer
# retry without refreshing its metadata.
_RETRIED_AS_NOT_ENOUGH_REPLICAS = COORDINATOR_MOVED | {
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def produce_error(code: ErrorCode, message: str, produce_version: int) -> KafkaError:
    """What a Produce answers for the coordinator's ``code`` about its transaction (Kafka's
    ReplicaManager translations, by Produce version)."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and produce_version < FIRST_ABORTABLE_PRODUCE_VERSION:
        code = ErrorCode.INVALID_TXN_STATE
    elif code in _RETRIED_AS_NOT_ENOUGH_REPLICAS or (
        code == ErrorCode.CONCURRENT_TRANSACTIONS and produce_version < FIRST_TV2_PRODUCE_VERSION
    ):
        code = ErrorCode.NOT_ENOUGH_REPLICAS
    elif code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return KafkaError(message, code)


def _first_transactional(batches: list[tuple[BatchHeader, memoryview]]) -> BatchHeader | None:
    for header, _view in batches:
        if header.is_transactional and not header.is_control:
            return header
    return None


def verify_transactional_append(
    transactions: TransactionService,
    transactional_id: str | None,
    topic: str,
    partition: Partition,
    batches: list[tuple[BatchHeader, memoryview]],
    produce_version: int,
    router: TransactionRouter | None = None,
) -> None:
    """Raise the produce error for a transactional batch the coordinator has not admitted (v3-11)."""
    header = _first_transactional(batches)
    if header is None:
        return
    if not transactional_id:
        raise KafkaError(
            f"transactional records for {topic}-{partition.index} without a transactional id",
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    if produce_version >= FIRST_TV2_PRODUCE_VERSION:
        return  # added by the Produce handler before the appends (handlers.produce)
    if router is not None and not router.is_local(transactional_id):
        return  # coordinated by another broker (see the module docstring)
    entry = partition.log.producer_state.last_entry(header.producer_id)
    if (
        entry is not None
        and entry.current_txn_first_offset is not None
        and entry.epoch == header.producer_epoch
    ):
        return  # this transaction already wrote here: it was verified then
    tp = (topic, partition.index)
    code = transactions.coordinator.verify_partitions_in_txn(
        transactional_id, header.producer_id, header.producer_epoch, [tp]
    )[tp]
    if code != ErrorCode.NONE:
        raise produce_error(
            ErrorCode(code),
            f"{topic}-{partition.index} is not in the transaction of {transactional_id!r} "
            f"(producer {header.producer_id} epoch {header.producer_epoch}): {ErrorCode(code).name}",
            produce_version,
        )
