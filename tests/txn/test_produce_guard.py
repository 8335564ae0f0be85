"""KIP-890 on the produce path: what a Produce answers when the coordinator does not admit its batch,
by Produce version (Kafka's ReplicaManager translations)."""

import asyncio
from types import SimpleNamespace

import pytest

from onceflow.broker.handlers.produce import add_partitions_for_produce
from onceflow.broker.txn.produce_guard import verify_transactional_append
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.record_codec import encode_batch
from onceflow.protocol.records import validate_produce_records

PID, EPOCH = 7, 3
E = ErrorCode


def txn_batch() -> bytes:
    return encode_batch(
        [(None, b"v")], producer_id=PID, producer_epoch=EPOCH, base_sequence=0, transactional=True
    )


class RefusingCoordinator:
    """Answers every question about the transaction with ``code``."""

    def __init__(self, code: ErrorCode):
        self.code = code

    def verify_partitions_in_txn(self, transactional_id, producer_id, producer_epoch, partitions):
        return dict.fromkeys(partitions, self.code)

    async def add_partitions_to_txn(self, transactional_id, producer_id, producer_epoch, partitions, **kw):
        raise KafkaError(f"refused: {self.code.name}", self.code)


def answer_v3_to_v11(code: ErrorCode, produce_version: int) -> ErrorCode:
    transactions = SimpleNamespace(coordinator=RefusingCoordinator(code))
    partition = SimpleNamespace(
        index=0, log=SimpleNamespace(producer_state=SimpleNamespace(last_entry=lambda pid: None))
    )
    batches = validate_produce_records(bytearray(txn_batch()))
    with pytest.raises(KafkaError) as raised:
        verify_transactional_append(transactions, "tid", "t", partition, batches, produce_version)
    return raised.value.code


def answer_v12(code: ErrorCode) -> ErrorCode:
    ctx = SimpleNamespace(
        transactions=SimpleNamespace(coordinator=RefusingCoordinator(code)), txn_router=None
    )
    request = SimpleNamespace(
        transactional_id="tid",
        topic_data=[
            SimpleNamespace(name="t", partition_data=[SimpleNamespace(index=0, records=txn_batch())])
        ],
    )
    errors = asyncio.run(add_partitions_for_produce(ctx, request))
    assert list(errors) == [("t", 0)]
    return errors[("t", 0)].code


@pytest.mark.parametrize(
    ("coordinator_says", "version", "produce_answers"),
    [
        (E.CONCURRENT_TRANSACTIONS, 11, E.NOT_ENOUGH_REPLICAS),
        (E.CONCURRENT_TRANSACTIONS, 3, E.NOT_ENOUGH_REPLICAS),
        (E.COORDINATOR_LOAD_IN_PROGRESS, 9, E.NOT_ENOUGH_REPLICAS),
        (E.NOT_COORDINATOR, 11, E.NOT_ENOUGH_REPLICAS),
        (E.TRANSACTION_ABORTABLE, 11, E.TRANSACTION_ABORTABLE),
        (E.TRANSACTION_ABORTABLE, 10, E.INVALID_TXN_STATE),
        (E.PRODUCER_FENCED, 9, E.INVALID_PRODUCER_EPOCH),
        (E.INVALID_TXN_STATE, 11, E.INVALID_TXN_STATE),
    ],
)
def test_produce_below_v12_translates_coordinator_answers(coordinator_says, version, produce_answers):
    assert answer_v3_to_v11(coordinator_says, version) == produce_answers


@pytest.mark.parametrize(
    ("coordinator_says", "produce_answers"),
    [
        # TV2 clients retry CONCURRENT_TRANSACTIONS themselves: it is answered as it is.
        (E.CONCURRENT_TRANSACTIONS, E.CONCURRENT_TRANSACTIONS),
        (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_ENOUGH_REPLICAS),
        (E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS),
        (E.NOT_COORDINATOR, E.NOT_ENOUGH_REPLICAS),
        (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH),
        (E.TRANSACTION_ABORTABLE, E.TRANSACTION_ABORTABLE),
    ],
)
def test_produce_v12_translates_coordinator_answers(coordinator_says, produce_answers):
    assert answer_v12(coordinator_says) == produce_answers
