"""Write committed and aborted transactions with raw requests (InitProducerId, AddPartitionsToTxn v3,
transactional Produce, EndTxn), independent of the client's transactional producer, so that the
source's read_committed behaviour can be tested on its own. Single broker: it is the coordinator."""

from __future__ import annotations

import asyncio

from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from onceflow.client import AsyncClient
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.record_codec import ProducerRecord, encode_batch

_CONCURRENT_TRANSACTIONS = 51


def _check(code: int, what: str) -> None:
    if code:
        raise KafkaError(f"{what}: error {code}", ErrorCode(code))


async def _transactions(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]]) -> None:
    tid = f"spark-test-{topic}"
    async with AsyncClient(bootstrap) as client:
        conn = await client.any_connection()
        init = await conn.send(
            InitProducerIdRequest(
                transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
            )
        )
        _check(init.error_code, "InitProducerId")
        pid, epoch, sequence = init.producer_id, init.producer_epoch, 0
        for values, commit in transactions:
            for _attempt in range(50):
                added = await conn.send(
                    AddPartitionsToTxnRequest(
                        v3_and_below_transactional_id=tid,
                        v3_and_below_producer_id=pid,
                        v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=[
                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])
                        ],
                    ),
                    version=3,
                )
                code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
                if code != _CONCURRENT_TRANSACTIONS:  # markers of the previous one still being written
                    break
                await asyncio.sleep(0.05)
            _check(code, "AddPartitionsToTxn")
            batch = encode_batch(
                [ProducerRecord(None, v) for v in values],
                compression=0,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=sequence,
                transactional=True,
            )
            await client.produce(topic, 0, batch, transactional_id=tid)
            sequence += len(values)
            ended = await conn.send(
                EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
            )
            _check(ended.error_code, "EndTxn")


def write_transactions(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]]) -> None:
    """Each ``(values, commit)`` is one transaction on partition 0 of ``topic``."""
    asyncio.run(_transactions(bootstrap, topic, transactions))
