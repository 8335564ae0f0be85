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
  (``add_partitions_to_txn`` with TV_2) before appending, so clients send no AddPartitionsToTxn; on
  a cluster whose coordinator of the transactional id is another broker, through the node's
  ``txn_router`` (an AddPartitionsToTxn v5 to that broker).
- On a cluster, the v3-11 check is made only where this broker coordinates the transactional id (a
  remote verification would need an await before the append, which must stay in request order).
  The same translations apply, except that CONCURRENT_TRANSACTIONS is answered as it is: with TV_2
  it is the usual answer while the previous transaction's markers go out, and these clients retry
  it (Kafka's ReplicaManager makes the same exception for clients that support the epoch bump).
"""

from __future__ import annotations

from typing import Any

from onceflow.broker.txn.metadata import TV_2
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.records import BatchHeader, read_header
from onceflow.protocol.transaction_versions import FIRST_ABORTABLE_PRODUCE_VERSION, FIRST_TV2_PRODUCE_VERSION

# Coordinator answers a producer may not retry on a Produce; NOT_ENOUGH_REPLICAS makes every producer
# retry without refreshing its metadata.
_RETRIED_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def _produce_error(code: ErrorCode, message: str, produce_version: int) -> KafkaError:
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
    transactions: Any,
    transactional_id: str | None,
    topic: str,
    partition: Any,
    batches: list[tuple[BatchHeader, memoryview]],
    produce_version: int,
    router: Any = None,
) -> None:
    """Raise the produce error for a transactional batch the coordinator has not admitted (v3-11)."""
    header = _first_transactional(batches)
    if header is None or transactions is None:
        return
    if not transactional_id:
        raise KafkaError(
            f"transactional records for {topic}-{partition.index} without a transactional id",
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    if produce_version >= FIRST_TV2_PRODUCE_VERSION:
        return  # added by add_partitions_for_produce before the appends
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
        raise _produce_error(
            ErrorCode(code),
            f"{topic}-{partition.index} is not in the transaction of {transactional_id!r} "
            f"(producer {header.producer_id} epoch {header.producer_epoch}): {ErrorCode(code).name}",
            produce_version,
        )


async def add_partitions_for_produce(ctx: Any, request: Any) -> dict[tuple[str, int], KafkaError]:
    """Produce v12+: add every partition with transactional batches to the producer's transaction
    (TV_2); returns the error for partitions that could not be added."""
    transactions = ctx.transactions
    transactional_id = request.transactional_id
    if transactions is None or not transactional_id:
        return {}
    wanted: list[tuple[str, int]] = []
    producer: tuple[int, int] | None = None
    for topic_data in request.topic_data:
        for data in topic_data.partition_data:
            if not data.records or len(data.records) < 61:
                continue
            header = read_header(memoryview(data.records))
            if header.is_transactional:
                wanted.append((topic_data.name, data.index))
                producer = (header.producer_id, header.producer_epoch)
    if not wanted or producer is None:
        return {}
    router = getattr(ctx, "txn_router", None)
    if router is not None and not router.is_local(transactional_id):
        codes = await router.add_partitions(transactional_id, producer[0], producer[1], wanted)
        return {
            tp: _produce_error(code, f"{tp[0]}-{tp[1]}: {code.name}", FIRST_TV2_PRODUCE_VERSION)
            for tp, code in codes.items()
            if code != ErrorCode.NONE
        }
    try:
        await transactions.coordinator.add_partitions_to_txn(
            transactional_id, producer[0], producer[1], wanted, transaction_version=TV_2
        )
    except KafkaError as exc:
        error = _produce_error(error_code_for(exc), str(exc), FIRST_TV2_PRODUCE_VERSION)
        return dict.fromkeys(wanted, error)
    return {}
