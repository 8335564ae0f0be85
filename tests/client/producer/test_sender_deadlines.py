"""Every record ends acknowledged or failed within delivery.timeout.ms, whatever state its partition
is in: a batch that expires while it waits to be retried (its partition without a leader) fails, and
the partition goes on with the next batches under a new epoch instead of staying blocked with nothing
to wake the sender; a callback that raises does not strand the other batches of its answer (both left
a flush waiting for ever)."""

from __future__ import annotations

import asyncio
import time

from tests.client.producer.test_sender import TOPIC, FakeNetwork, ScriptedBroker

from onceflow.client.producer.accumulator import RecordAccumulator
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.errors import DeliveryTimeoutError
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode

DELIVERY_TIMEOUT_MS = 400


class LeaderlessNetwork(FakeNetwork):
    """The partition has no leader from the first refresh until ``leader_back`` (a monotonic time)."""

    def __init__(self, brokers, leader_back: float) -> None:
        super().__init__(brokers, 0)
        self.leader_back = leader_back

    async def refresh(self, topics):
        self.refreshes += 1
        if time.monotonic() < self.leader_back:
            self.leaders.pop((TOPIC, 0), None)
        else:
            self.leaders[(TOPIC, 0)] = 1


def test_a_retry_expiring_without_a_leader_fails_and_the_partition_goes_on_under_a_new_epoch():
    config = ProducerConfig(
        batch_size=200,
        linger_ms=0,
        retry_backoff_ms=10,
        request_timeout_ms=200,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
    )
    # Batch 0 is acknowledged; batch 1 is refused (the leader moved) and waits for a leader that comes
    # back only after its delivery.timeout.ms.
    # (node 0 refuses every retry that reaches it before the refresh lands).
    brokers = {
        0: ScriptedBroker(0, [ErrorCode.NONE] + [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 100),
        1: ScriptedBroker(1),
    }
    # The leader comes back after batch 1 expired, well within the delivery.timeout.ms of batch 2.
    network = LeaderlessNetwork(brokers, time.monotonic() + 1.5 * DELIVERY_TIMEOUT_MS / 1000)
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(batch_size=200, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        first = acc.try_append(TOPIC, 0, 1, None, b"x" * 150, [])
        await asyncio.wait_for(sender.wait_idle(), 5)
        second = acc.try_append(TOPIC, 0, 1, None, b"x" * 150, [])
        while not brokers[0].seen[1:]:
            await asyncio.sleep(0.005)
        while not second.done():  # batch 1 waits for a leader until it expires
            await asyncio.sleep(0.005)
        third = acc.try_append(TOPIC, 0, 1, None, b"x" * 150, [])
        await asyncio.wait_for(sender.wait_idle(), 5)  # hung: the partition stayed blocked
        await sender.stop()
        return first, second, third, sender

    first, second, third, sender = asyncio.run(scenario())
    assert first.result().offset == 0
    assert isinstance(second.exception(), DeliveryTimeoutError)
    # Batch 2 went to the new leader after the gap batch 1 left: a new epoch, from sequence 0.
    assert third.exception() is None
    assert brokers[1].seen == [(1, 1, 0, 1)]
    assert sender.epoch_bumps == 1


def test_a_raising_callback_does_not_strand_the_other_batches_of_the_answer():
    config = ProducerConfig(batch_size=200, linger_ms=0, retry_backoff_ms=10, request_timeout_ms=1000)
    brokers = {0: ScriptedBroker(0)}
    network = FakeNetwork(brokers, 0)
    network.leaders[(TOPIC, 1)] = 0
    network.partition_counts[TOPIC] = 2
    txn = TransactionManager(None)
    txn.set_producer(7, 0)
    called = []

    def boom(metadata, error):
        called.append(metadata.partition)
        raise RuntimeError("a user's callback failed")

    async def scenario():
        acc = RecordAccumulator(batch_size=200, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        # Both batches go in one request (one per partition); the first one's callback raises.
        futures = [acc.try_append(TOPIC, p, 1, None, b"x" * 150, []) for p in (0, 1)]
        futures[0].batch.add_callback(futures[0].index, boom)
        await asyncio.wait_for(sender.wait_idle(), 5)
        later = acc.try_append(TOPIC, 0, 1, None, b"x" * 150, [])
        await asyncio.wait_for(sender.wait_idle(), 5)
        await sender.stop()
        return futures + [later]

    futures = asyncio.run(scenario())
    assert len(brokers[0].seen) == 3 and called == [0]
    assert [f.done() for f in futures] == [True, True, True]  # partition 1's batch was stranded
    assert [f.result().partition for f in futures] == [0, 1, 0]
