"""The producer's requests to coordinators: one function per API, each building its request and
turning the answer into a result or a classified error (fatal, abortable, or retried inside).

InitProducerId (idempotent: any broker; transactional: the transaction coordinator, with the current
producer id and epoch for a KIP-360 bump), AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit (to
the group coordinator), EndTxn.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from onceflow.client.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from onceflow.client.producer.errors import (
    FATAL_CODES,
    GroupRebalancedCommitError,
    TransactionAbortableError,
    TransactionalIdAuthorizationError,
    fatal_error_for,
)
from onceflow.client.producer.network import ProducerNetwork
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.transaction_versions import (
    FIRST_TV2_END_TXN_VERSION,
    FIRST_TV2_TXN_OFFSET_COMMIT_VERSION,
)

log = logging.getLogger(__name__)

# Clients send AddPartitionsToTxn up to v3 (v4+ is broker-to-broker, KIP-890); InitProducerId v6 (two-phase
# commit) only for a producer with transaction.two.phase.commit.enable, as Kafka's client.
ADD_PARTITIONS_MAX_VERSION = 3
INIT_PRODUCER_ID_MAX_VERSION = 5
# InitProducerId v6 is the first with Enable2Pc and KeepPreparedTxn (KIP-939): a two-phase commit
# producer needs it, and a broker without it has no two-phase commit.
TWO_PHASE_INIT_PRODUCER_ID_VERSION = 6
NO_TWO_PHASE_COMMIT = (
    "the broker does not support two-phase commit (KIP-939: InitProducerId v6 with enable2Pc); "
    "use ordinary transactions"
)
# EndTxn v5 and TxnOffsetCommit v5 are KIP-890's transaction protocol v2 (an epoch bump at every EndTxn,
# partitions and the offsets partition added by the broker); a transaction of the protocol v1 (explicit
# AddPartitionsToTxn / AddOffsetsToTxn, one epoch per producer session) stays below them, as Kafka's
# client does. Which one a transaction uses is TransactionManager.transaction_v2.
_RETRIED = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS})


def _classify(code: ErrorCode, what: str) -> KafkaError:
    if code in FATAL_CODES:
        return fatal_error_for(code, what)
    return TransactionAbortableError(f"{what}: {code.name}; abort the transaction and retry it")


def _deadline(config) -> float:
    return time.monotonic() + config.max_block_ms / 1000.0


async def init_producer_id(network: ProducerNetwork, txn: TransactionManager, config) -> tuple[int, int]:
    """A producer id and epoch; with a transactional.id this fences every earlier producer using it."""
    deadline = _deadline(config)
    if not txn.is_transactional:
        while True:
            try:
                conn = await network.any_connection()
                version = min(conn.version_for(InitProducerIdRequest), INIT_PRODUCER_ID_MAX_VERSION)
                response = await conn.send(
                    InitProducerIdRequest(
                        transactional_id=None, transaction_timeout_ms=config.transaction_timeout_ms
                    ),
                    version=version,
                )
                code = ErrorCode(response.error_code)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                code = exc.code
            if code == ErrorCode.NONE:
                return response.producer_id, response.producer_epoch
            if not code.retriable or time.monotonic() >= deadline:
                raise KafkaError(f"InitProducerId failed: {code.name}", code)
            await asyncio.sleep(network.retry_backoff_s)
    response = await _init_transactional(network, txn, config, deadline, enable_2pc=False, keep=False)
    return response.producer_id, response.producer_epoch


async def init_two_phase_producer_id(
    network: ProducerNetwork, txn: TransactionManager, config, *, keep_prepared_txn: bool
) -> tuple[int, int, tuple[int, int] | None]:
    """InitProducerId v6 with enable2Pc (KIP-939): the producer id and epoch, and with
    ``keep_prepared_txn`` the producer id and epoch of the prepared transaction the coordinator kept
    (None when none was open). A broker without InitProducerId v6 has no two-phase commit: refused
    with UNSUPPORTED_VERSION and a sentence saying so."""
    response = await _init_transactional(
        network, txn, config, _deadline(config), enable_2pc=True, keep=keep_prepared_txn
    )
    ongoing = None
    if keep_prepared_txn and response.ongoing_txn_producer_id >= 0:
        ongoing = (response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch)
    return response.producer_id, response.producer_epoch, ongoing


async def _init_transactional(
    network: ProducerNetwork,
    txn: TransactionManager,
    config,
    deadline: float,
    *,
    enable_2pc: bool,
    keep: bool,
):
    bump = (
        txn.producer_id >= 0 and not enable_2pc
    )  # KIP-360: bump our own epoch after an abortable sequence error

    def make():
        return InitProducerIdRequest(
            transactional_id=txn.transactional_id,
            transaction_timeout_ms=txn.transaction_timeout_ms,
            producer_id=txn.producer_id if bump else -1,
            producer_epoch=txn.producer_epoch if bump else -1,
            enable2_pc=enable_2pc,
            keep_prepared_txn=keep,
        )

    response = await network.coordinator_request(
        KEY_TYPE_TRANSACTION,
        txn.transactional_id,
        make,
        lambda r: r.error_code,
        what=f"InitProducerId({txn.transactional_id!r})",
        deadline=deadline,
        max_version=TWO_PHASE_INIT_PRODUCER_ID_VERSION if enable_2pc else INIT_PRODUCER_ID_MAX_VERSION,
        min_version=TWO_PHASE_INIT_PRODUCER_ID_VERSION if enable_2pc else None,
        below_min_version=NO_TWO_PHASE_COMMIT,
        retry_codes=_RETRIED,
    )
    code = ErrorCode(response.error_code)
    if code != ErrorCode.NONE:
        what = f"init_transactions({txn.transactional_id!r})"
        if enable_2pc and code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise TransactionalIdAuthorizationError(
                f"{what}: two-phase commit refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): the broker's "
                "transaction.two.phase.commit.enable is false, or this transactional.id may not use it"
            )
        raise (
            fatal_error_for(code, what)
            if code in FATAL_CODES
            else KafkaError(f"{what} failed: {code.name}", code)
        )
    return response


async def add_partitions_to_txn(
    network: ProducerNetwork, txn: TransactionManager, partitions: list[tuple[str, int]], config
) -> None:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)

    def make():
        return AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn.transactional_id,
            v3_and_below_producer_id=txn.producer_id,
            v3_and_below_producer_epoch=txn.producer_epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )

    def first_error(response) -> int:
        for topic in response.results_by_topic_v3_and_below:
            for p in topic.results_by_partition:
                if p.partition_error_code not in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED):
                    return p.partition_error_code
        return getattr(response, "error_code", 0) or 0

    response = await network.coordinator_request(
        KEY_TYPE_TRANSACTION,
        txn.transactional_id,
        make,
        first_error,
        what="AddPartitionsToTxn",
        deadline=_deadline(config),
        max_version=ADD_PARTITIONS_MAX_VERSION,
        retry_codes=_RETRIED | {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
    code = ErrorCode(first_error(response))
    if code != ErrorCode.NONE:
        raise _classify(code, f"adding {partitions} to the transaction")
    txn.partitions_added(partitions)
    log.debug("partitions %s added to transaction %r", partitions, txn.transactional_id)


async def add_offsets_to_txn(
    network: ProducerNetwork, txn: TransactionManager, group_id: str, config
) -> None:
    response = await network.coordinator_request(
        KEY_TYPE_TRANSACTION,
        txn.transactional_id,
        lambda: AddOffsetsToTxnRequest(
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            group_id=group_id,
        ),
        lambda r: r.error_code,
        what="AddOffsetsToTxn",
        deadline=_deadline(config),
        retry_codes=_RETRIED,
    )
    code = ErrorCode(response.error_code)
    if code != ErrorCode.NONE:
        raise _classify(code, f"adding the offsets of group {group_id!r} to the transaction")


async def txn_offset_commit(
    network: ProducerNetwork,
    txn: TransactionManager,
    offsets: dict[tuple[str, int], tuple[int, str]],
    group,
    config,
) -> None:
    """TxnOffsetCommit of ``{(topic, partition): (offset, metadata)}`` for ``group`` (a
    ConsumerGroupMetadata). From v3 the request carries the member's generation, member id and
    instance id (KIP-447), so the coordinator refuses a commit from a member fenced by a rebalance;
    a bare group id sends generation -1 and member "", which it does not check."""
    topics: dict[str, list] = {}
    for (topic, partition), (offset, metadata) in sorted(offsets.items()):
        topics.setdefault(topic, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata=metadata,
            )
        )

    def make():
        return TxnOffsetCommitRequest(
            transactional_id=txn.transactional_id,
            group_id=group.group_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )

    def first_error(response) -> int:
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    return p.error_code
        return 0

    response = await network.coordinator_request(
        KEY_TYPE_GROUP,
        group.group_id,
        make,
        first_error,
        what="TxnOffsetCommit",
        deadline=_deadline(config),
        # v5 makes the group coordinator add __consumer_offsets to the transaction itself (TV2).
        max_version=None if txn.transaction_v2 else FIRST_TV2_TXN_OFFSET_COMMIT_VERSION - 1,
        retry_codes=_RETRIED | {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
    code = ErrorCode(first_error(response))
    if code == ErrorCode.NONE:
        return
    if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
        # KIP-447: the consumer lost its partitions to a rebalance; this transaction must not commit.
        raise GroupRebalancedCommitError(
            f"group {group.group_id!r} refused the offsets of member {group.member_id!r} generation "
            f"{group.generation_id} ({code.name}): the group rebalanced and the partitions may belong to "
            "another member; abort the transaction and continue from the new assignment",
            code,
        )
    raise _classify(code, f"committing offsets of group {group.group_id!r} in the transaction")


async def end_txn(
    network: ProducerNetwork, txn: TransactionManager, commit: bool, config
) -> tuple[int, int] | None:
    """EndTxn. Under the transaction protocol v2 returns the producer id and epoch the coordinator
    gave the next transaction (epoch + 1, or a new producer id at epoch 0 once the epoch is exhausted);
    the caller adopts them. A retry after a lost answer carries the old epoch: the coordinator
    recognises it (KAFKA-17754) and answers the same new producer id and epoch."""
    tv2 = txn.transaction_v2
    what = "commit_transaction" if commit else "abort_transaction"
    response = await network.coordinator_request(
        KEY_TYPE_TRANSACTION,
        txn.transactional_id,
        lambda: EndTxnRequest(
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            committed=commit,
        ),
        lambda r: r.error_code,
        what="EndTxn",
        deadline=_deadline(config),
        max_version=FIRST_TV2_END_TXN_VERSION if tv2 else FIRST_TV2_END_TXN_VERSION - 1,
        retry_codes=_RETRIED,
    )
    code = ErrorCode(response.error_code)
    if code == ErrorCode.NONE:
        producer_id = getattr(response, "producer_id", None)
        if tv2 and producer_id is not None and producer_id >= 0:  # absent below v5
            return response.producer_id, response.producer_epoch
        return None
    if tv2 and code in _FATAL_END_TXN_V2:
        raise fatal_error_for(code, what)
    raise _classify(code, what)


# Kafka's TransactionManager treats these EndTxn answers as fatal; under the protocol v2 we do as it
# does (an INVALID_TXN_STATE there means the coordinator and producer disagree on which transaction
# is open, which no retry or abort can repair). The protocol v1 keeps its earlier, abortable answer.
_FATAL_END_TXN_V2 = FATAL_CODES | {ErrorCode.INVALID_TXN_STATE}
