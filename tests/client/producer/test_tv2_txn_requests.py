"""The client's transaction protocol v2 rules without a broker: the per-transaction latch, local
partition adds, and what EndTxn v5 answers mean (adopted producer id/epoch, TV2-fatal errors)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from onceflow.client.async_client import finalized_feature_level
from onceflow.client.producer import txn_requests
from onceflow.client.producer.errors import FatalProducerError, TransactionAbortableError
from onceflow.client.producer.transaction_manager import TransactionManager, TxnEvent
from onceflow.protocol.transaction_versions import FIRST_TV2_END_TXN_VERSION


class OneAnswerNetwork:
    """Answers every coordinator request with ``response``; records the version cap it was given."""

    def __init__(self, response) -> None:
        self.response = response
        self.max_versions: list[int | None] = []

    async def coordinator_request(self, key_type, key, make, error_of, *, max_version=None, **_kwargs):
        make()
        self.max_versions.append(max_version)
        return self.response


def manager(level: int) -> TransactionManager:
    txn = TransactionManager("tid")
    txn.set_producer(7, 3)
    txn.transition(TxnEvent.INIT)
    txn.transition(TxnEvent.INITIALIZED)
    txn.transition(TxnEvent.BEGIN)
    txn.latch_transaction_version(level)
    return txn


CONFIG = SimpleNamespace(max_block_ms=1000)


def test_finalized_level_comes_from_the_newest_epoch():
    old = SimpleNamespace(finalized_features_epoch=5, finalized_features={"transaction.version": 1})
    new = SimpleNamespace(finalized_features_epoch=9, finalized_features={"transaction.version": 2})
    none = SimpleNamespace(finalized_features_epoch=-1, finalized_features={})
    assert finalized_feature_level([old, new, none], "transaction.version") == 2
    assert finalized_feature_level([old, none], "transaction.version") == 1
    assert finalized_feature_level([], "transaction.version") == 0


@pytest.mark.parametrize("level, v2", [(0, False), (1, False), (2, True)])
def test_partitions_are_added_locally_only_under_v2(level, v2):
    txn = manager(level)
    txn.maybe_add_partition(("t", 0))
    assert txn.transaction_v2 is v2
    assert txn.is_partition_added(("t", 0)) is v2
    assert txn.partitions_to_add() == ([] if v2 else [("t", 0)])
    assert txn.started_on_coordinator is v2


def test_end_txn_v5_answer_is_returned_for_adoption_with_a_rotated_producer_id():
    network = OneAnswerNetwork(SimpleNamespace(error_code=0, producer_id=8, producer_epoch=0))
    answer = asyncio.run(txn_requests.end_txn(network, manager(2), True, CONFIG))
    assert answer == (8, 0)
    assert network.max_versions == [FIRST_TV2_END_TXN_VERSION]


def test_end_txn_under_v1_stays_below_v5_and_adopts_nothing():
    network = OneAnswerNetwork(SimpleNamespace(error_code=0, producer_id=None, producer_epoch=None))
    assert asyncio.run(txn_requests.end_txn(network, manager(1), True, CONFIG)) is None
    assert network.max_versions == [FIRST_TV2_END_TXN_VERSION - 1]


@pytest.mark.parametrize("level, error", [(2, FatalProducerError), (1, TransactionAbortableError)])
def test_invalid_txn_state_on_end_txn_is_fatal_only_under_v2(level, error):
    network = OneAnswerNetwork(SimpleNamespace(error_code=48, producer_id=-1, producer_epoch=-1))
    with pytest.raises(error):
        asyncio.run(txn_requests.end_txn(network, manager(level), True, CONFIG))
