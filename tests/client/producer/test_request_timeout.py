"""A Produce answer the broker holds back past request.timeout.ms: the producer disconnects, as
Kafka's NetworkClient does, and resends on a new connection in sequence order with the same sequence
numbers, so every record is written exactly once, in order.

The broker (in process, so the test can plan its fault) appends the held request's batch, then sleeps
far longer than the test lasts before answering (``delay-response``). It answers a connection's
requests in order, so every later answer on that connection waits behind the held one: a producer that
kept the connection after the timeout would retry into the same queue until delivery.timeout.ms.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.client.producer.conftest import read_back
from tests.idempotence.inprocess import ThreadedBroker

from onceflow.broker.faults import DELAY_RESPONSE
from onceflow.client import AsyncClient
from onceflow.client.producer import AsyncProducer

RECORDS = 600
HELD_PRODUCE = 3  # the broker's third Produce request (the first goes alone: a new producer's first batch)


@pytest.fixture
def held_broker(tmp_path):
    """A broker that appends its ``HELD_PRODUCE``-th Produce request and then holds the answer."""
    broker = ThreadedBroker(tmp_path / "data").start()
    faults = broker.faults
    faults.set_parameter("delay-response.ms", 600_000)
    held: list[int] = []
    produce_requests = iter(range(1, 1_000_000))
    other_faults = faults.fire

    def fire(name: str) -> bool:  # called on the broker's thread only
        if name != DELAY_RESPONSE:
            return other_faults(name)
        number = next(produce_requests)
        if number == HELD_PRODUCE:
            held.append(number)
            return True
        return False

    faults.fire = fire
    broker.held = held
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
def test_a_held_produce_answer_closes_the_connection_and_the_batches_are_written_once_in_order(
    held_broker, transactional
):
    topic = f"held-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap.servers": held_broker.bootstrap,
        "batch.size": 2000,  # ~10 records a batch: many requests, several in flight behind the held one
        "linger.ms": 1,
        "request.timeout.ms": 500,
        "delivery.timeout.ms": 8000,  # a producer stuck behind the held answer fails within this
        "retry.backoff.ms": 10,
    }
    if transactional:
        # The transaction coordinator is the same broker: its requests share the connection too.
        settings["transactional.id"] = f"held-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with AsyncClient(held_broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=1)
        async with AsyncProducer(settings) as producer:
            if transactional:
                await producer.init_transactions()
                producer.begin_transaction()
            futures = [
                await producer.send(topic, b"%06d" % i + b"." * 150, partition=0) for i in range(RECORDS)
            ]
            if transactional:
                await producer.commit_transaction()
            else:
                await producer.flush()
            return [await f for f in futures]

    metadata = asyncio.run(scenario())
    assert held_broker.held == [HELD_PRODUCE]  # the fault really fired

    records = read_back(
        held_broker.bootstrap, topic, RECORDS, read_committed=transactional, timeout_s=30
    )  # extras would arrive in its tail
    values = [int(m.value()[:6]) for m in sorted(records, key=lambda m: m.offset())]
    assert values == list(range(RECORDS))  # each record once, in send order
    assert [m.offset for m in metadata] == list(range(RECORDS))  # and each future says where it is
