"""max.request.size: send() refuses a record no request could carry (Kafka's RecordTooLargeException),
and the sender never puts more than max.request.size of batches in one Produce request."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.producer import ProduceRequest
from tests.client.producer.conftest import read_back
from tests.client.producer.test_sender import FakeNetwork, ScriptedBroker

from onceflow.client.producer import AsyncProducer, Producer, RecordTooLargeError
from onceflow.client.producer.accumulator import RecordAccumulator, serialized_size_upper_bound
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode

RECORDS = [
    (None, b""),
    (None, None),
    (b"k", b"v" * 100),
    (b"key" * 50, b"v" * 70_000),
    (None, b"v" * 3_000_000),
]


@pytest.mark.parametrize("key,value", RECORDS, ids=lambda x: "none" if x is None else str(len(x)))
@pytest.mark.parametrize("headers", [[], [("h", b"x" * 200), ("trace", None)]], ids=["no-headers", "headers"])
def test_size_bound_is_at_least_the_built_batch_and_tight(key, value, headers):
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    builder.append(0, timestamp=1_700_000_000_000, key=key, value=value, headers=headers)
    built = len(builder.build())
    bound = serialized_size_upper_bound(key, value, headers)
    assert built <= bound <= built + 30


def test_records_too_large_are_refused_before_anything_is_queued(broker):
    topic = f"size-{uuid.uuid4().hex[:8]}"
    limit = 2_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "max.request.size": limit})
    try:
        fits = b"a" * (limit - 100)  # bound: 61 + 21 + 1 + 2 + 1900 = 1985
        producer.send(topic, fits).get(30)
        with pytest.raises(RecordTooLargeError, match="max.request.size") as refused:
            producer.send(topic, b"b" * limit)
        assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(RecordTooLargeError):
            producer.send(topic, b"c", headers=[("big", b"h" * limit)])
        # send_many is all or nothing: the small records before the big one are not queued either.
        with pytest.raises(RecordTooLargeError):
            producer.send_many(topic, [b"d1", b"d2", b"e" * limit, b"d3"], partition=0)
        producer.send(topic, b"last", partition=0).get(30)
        producer.flush()
    finally:
        producer.close()
    values = [m.value() for m in read_back(broker.bootstrap, topic, 2)]
    assert sorted(values) == sorted([fits, b"last"])


def test_buffer_memory_bounds_a_record_too(broker):
    async def scenario():
        producer = AsyncProducer(
            {"bootstrap.servers": broker.bootstrap, "buffer.memory": 5_000, "batch.size": 1_000}
        )
        try:
            with pytest.raises(RecordTooLargeError, match="buffer.memory"):
                await producer.send(f"size-{uuid.uuid4().hex[:8]}", b"x" * 6_000)
        finally:
            await producer.close()

    asyncio.run(scenario())


class _RequestLog(ScriptedBroker):
    """Notes how many batches and bytes of records each Produce request carried."""

    def __init__(self, node: int) -> None:
        super().__init__(node)
        self.requests: list[tuple[int, int]] = []

    def answer(self, request):
        frame = request.encode(correlation_id=1, client_id="test")
        decoded = ProduceRequest.decode(frame[4:], version=request.version, header=True)
        datas = [d for t in decoded.topic_data for d in t.partition_data]
        self.requests.append((len(datas), sum(len(d.records) for d in datas)))
        return super().answer(request)


def test_a_request_holds_no_more_than_max_request_size_of_batches():
    partitions = 6
    config = ProducerConfig(batch_size=400, linger_ms=0, max_request_size=1_000, retry_backoff_ms=1)
    broker = _RequestLog(0)
    network = FakeNetwork({0: broker})
    network.leaders = {("t", p): 0 for p in range(partitions)}
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(batch_size=400, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        # Fill one ~300-byte batch per partition before the sender starts, so all are ready at once.
        futures = [acc.try_append("t", p, 1, None, b"x" * 220, []) for p in range(partitions)]
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        await asyncio.wait_for(sender.wait_idle(), 10)
        await sender.stop()
        return [f.result().offset for f in futures]

    offsets = asyncio.run(scenario())
    assert len(offsets) == partitions and all(o >= 0 for o in offsets)
    assert sum(count for count, _ in broker.requests) == partitions
    assert len(broker.requests) >= 2  # six batches of ~300 bytes cannot share one 1,000-byte request
    assert all(size <= 1_000 for _, size in broker.requests), broker.requests
