"""Idempotent produce through the onceflow broker's own fault points: no duplicates, order kept.

The broker appends and then loses 5% of its Produce responses (``drop-response-after-append``) or
closes the connection instead of answering (``disconnect-after-append``); the producer times out or
sees the disconnect, retries with the same sequence numbers and is answered with the original
offsets. Also the client's ``delay-send`` fault, which reorders pipelined requests: the broker
refuses the early ones (OUT_OF_ORDER_SEQUENCE_NUMBER) and they are resent in sequence order. A
partition's first batch is never overtaken: the broker would accept any sequence from a producer it
does not know yet, so the producer sends nothing else there until that batch is acknowledged.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.client.producer.conftest import read_back
from tests.helpers.broker import BrokerProcess

from onceflow.client.producer import AsyncProducer, ClientFaults

RECORDS = 3000


@pytest.fixture(scope="module")
def faulty_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("faulty"),
        extra_args=(
            "--dev",
            "--fault",
            "drop-response-after-append=0.05",
            "--fault",
            "disconnect-after-append=0.03",
        ),
    )
    proc.start()
    yield proc
    proc.stop()


def produce(bootstrap: str, topic: str, *, partitions: int, faults: ClientFaults | None = None) -> list:
    settings = {
        "bootstrap.servers": bootstrap,
        "batch.size": 4000,
        "linger.ms": 1,
        "request.timeout.ms": 700,
        "delivery.timeout.ms": 60000,
        "retry.backoff.ms": 10,
    }

    async def scenario():
        async with AsyncProducer(settings, faults=faults) as producer:
            futures = [
                await producer.send(topic, b"%06d" % i + b"." * 200, key=b"%d" % (i % partitions))
                for i in range(RECORDS)
            ]
            await producer.flush()
            return [await f for f in futures]

    return asyncio.run(scenario())


def check_exactly_once_in_order(bootstrap: str, topic: str, metadata: list) -> None:
    records = read_back(bootstrap, topic, RECORDS, timeout_s=30)  # extras arrive in its tail
    values = [int(m.value()[:6]) for m in records]
    assert len(values) == RECORDS, (
        f"{len(values) - len(set(values))} duplicates, {RECORDS - len(set(values))} lost"
    )
    assert sorted(values) == list(range(RECORDS))
    by_partition: dict[int, list[int]] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        by_partition.setdefault(m.partition(), []).append(int(m.value()[:6]))
    for partition_values in by_partition.values():
        assert partition_values == sorted(partition_values)  # send order kept per partition
    # Every record's metadata points at where the record really is.
    where = {(m.partition(), m.offset()): int(m.value()[:6]) for m in records}
    assert all(where[(md.partition, md.offset)] == i for i, md in enumerate(metadata))


def test_lost_acks_and_disconnects_make_no_duplicates(faulty_broker):
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    metadata = produce(faulty_broker.bootstrap, topic, partitions=1)
    check_exactly_once_in_order(faulty_broker.bootstrap, topic, metadata)


def test_delayed_sends_are_reordered_back(faulty_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"delay-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": faulty_broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    faults = ClientFaults({"delay-send": 0.1, "delay-send.ms": 30}, seed=5)
    metadata = produce(faulty_broker.bootstrap, topic, partitions=3, faults=faults)
    assert faults.fired  # some sends really were delayed
    check_exactly_once_in_order(faulty_broker.bootstrap, topic, metadata)


def test_a_delayed_first_batch_is_not_overtaken(faulty_broker):
    """The first request of a new producer is delayed: were the next batches sent meanwhile, the broker
    (which does not know the producer yet) would write them first and the first batch after them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"first-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": faulty_broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    faults = ClientFaults({"delay-send.ms": 50})
    faults.plan("delay-send", [1])
    metadata = produce(faulty_broker.bootstrap, topic, partitions=1, faults=faults)
    assert faults.fired[0] == ("delay-send", 1)
    check_exactly_once_in_order(faulty_broker.bootstrap, topic, metadata)
