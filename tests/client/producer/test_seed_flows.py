"""The seeds' idempotence flows (000_*, figures 2-5), run with the real sender against onceflow.

Each batch holds one record (A, B, C, ...: 600 bytes in a 1,000-byte batch.size), so a batch is a
Produce request and the client's fault points can lose exactly the responses or requests the figures
lose. What the user sees is the log read back by confluent-kafka.

- Figure 2, all acknowledged: A..E written once, in order.
- Figure 3, the ACKs of D and E are lost: the producer times out and resends them with the same
  sequence numbers; the broker recognises them (last 5 batches) and answers with the original offsets.
- Figure 4, C is lost on the way: D and E meet OUT_OF_ORDER_SEQUENCE_NUMBER, wait for C's retry and
  follow it: A..E once, in order.
- Figure 5, six in flight and A's ACK lost: by the time A is resent the broker remembers only B..F, so A
  is out of order; the producer bumps its epoch (KIP-360) and A is written twice. With <= 5 in flight
  the producer never has more than 5 batches outstanding from the earliest unacknowledged one, so the
  same loss is deduplicated; and six in flight with idempotence is refused unless the unsafe switch is on.
  Our producer sends a partition's first batch alone (the broker would take any sequence from a
  producer it does not know), so these flows start after one acknowledged record, "-".
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.client.producer.conftest import read_back
from tests.helpers.broker import BrokerProcess

from onceflow.client.producer import AsyncProducer, ClientFaults, ProducerConfig
from onceflow.protocol.errors import InvalidConfig

NAMES = "ABCDEF"


@pytest.fixture(scope="module")
def onceflow(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("seed-flows"), extra_args=("--dev",))
    proc.start()
    yield proc
    proc.stop()


def run_flow(
    bootstrap: str, batches: int, *, in_flight: int = 5, unsafe: bool = False, warm_up: bool = False, **plan
):
    """Send ``batches`` one-record batches with the planned faults; (log values, offsets, epoch). With
    ``warm_up``, a record "-" is sent and acknowledged first (request 1), so A..F pipeline at once."""
    topic = f"seed-{uuid.uuid4().hex[:8]}"
    faults = ClientFaults()
    for name, requests in plan.items():
        faults.plan(name.replace("_", "-"), requests)
    settings = {
        "bootstrap.servers": bootstrap,
        "batch.size": 1000,
        "linger.ms": 0,
        "request.timeout.ms": 600,
        "delivery.timeout.ms": 30000,
        "retry.backoff.ms": 20,
        "max.in.flight.requests.per.connection": in_flight,
        "unsafe.allow.max.in.flight.above.5": unsafe,
    }

    async def scenario():
        async with AsyncProducer(settings, faults=faults) as producer:
            await producer.partitions_for(topic)
            if warm_up:
                await (await producer.send(topic, b"-" * 600, partition=0))
            futures = [
                await producer.send(topic, NAMES[i].encode() * 600, partition=0) for i in range(batches)
            ]
            offsets = [(await f).offset for f in futures]
            return offsets, producer.producer_id_and_epoch[1]

    offsets, epoch = asyncio.run(scenario())
    assert len(faults.fired) == sum(len(v) for v in plan.values())  # the planned faults happened
    expected = batches + (1 if warm_up else 0)
    values = [m.value()[:1].decode() for m in read_back(bootstrap, topic, expected, timeout_s=10)]
    return "".join(values), offsets, epoch


def test_figure2_all_acknowledged(onceflow):
    log, offsets, epoch = run_flow(onceflow.bootstrap, 5)
    assert (log, offsets, epoch) == ("ABCDE", [0, 1, 2, 3, 4], 0)


def test_figure3_lost_acks_are_deduplicated(onceflow):
    log, offsets, epoch = run_flow(onceflow.bootstrap, 5, drop_response=[4, 5])
    assert log == "ABCDE"
    assert offsets == [0, 1, 2, 3, 4]  # D and E answered with their original offsets
    assert epoch == 0


def test_figure4_lost_batch_is_resent_in_order(onceflow):
    log, offsets, epoch = run_flow(onceflow.bootstrap, 5, drop_request=[3])
    assert log == "ABCDE"
    assert offsets == [0, 1, 2, 3, 4]


def test_figure5_five_in_flight_never_duplicates(onceflow):
    log, offsets, epoch = run_flow(onceflow.bootstrap, 6, in_flight=5, warm_up=True, drop_response=[2])
    assert log == "-ABCDEF"
    assert offsets == [1, 2, 3, 4, 5, 6]
    assert epoch == 0


def test_figure5_six_in_flight_is_refused_by_configuration():
    with pytest.raises(InvalidConfig, match="remembers only the last 5 batches"):
        ProducerConfig(enable_idempotence=True, max_in_flight_requests_per_connection=6)


def test_figure5_six_in_flight_with_the_unsafe_switch_writes_a_duplicate(onceflow):
    log, offsets, epoch = run_flow(
        onceflow.bootstrap, 6, in_flight=6, unsafe=True, warm_up=True, drop_response=[2]
    )
    assert log == "-ABCDEFA"  # A was written twice: the broker's 5-batch cache no longer knew it
    assert offsets == [7, 2, 3, 4, 5, 6]  # the user is told A is at offset 7
    assert epoch == 1  # KIP-360: the producer bumped its epoch to resend A
