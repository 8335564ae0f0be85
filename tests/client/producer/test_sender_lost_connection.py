"""A Produce request that cannot be written because the connection is already gone is a lost
connection, retried like any other, never the end of the sender.

The failover load test (leaders killed with kill -9 under idempotent load) found it: uvloop raises
RuntimeError ("the handler is closed") when a request is written to a transport it closed after the
peer reset the connection, before the connection's read loop has seen the EOF. That error came out of
the sender's pass and ended its task, with the request's batches counted in flight: the records the
dead broker had stored were never acknowledged, every later batch stayed queued, and the flush hung.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.client.producer.test_sender import TOPIC, FakeNetwork, ScriptedBroker
from tests.client.test_connection import _RecordingWriter

from onceflow.client.connection import BrokerConnectionError, Connection
from onceflow.client.producer.accumulator import RecordAccumulator
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.produce_wire import ProduceRequestFrame
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager

CLOSED_HANDLE = (
    "unable to perform operation on <TCPTransport closed=True reading=False>; the handler is closed"
)


class _ClosedTransport:
    """uvloop's transport after the peer reset the connection: every write raises RuntimeError."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _ClosedWriter(_RecordingWriter):
    def __init__(self) -> None:
        super().__init__()
        self.transport = _ClosedTransport()

    def write(self, data: bytes) -> None:
        raise RuntimeError(CLOSED_HANDLE)


def test_a_write_to_a_transport_the_loop_closed_fails_the_request_as_a_lost_connection():
    async def scenario():
        reader = asyncio.StreamReader()  # the read loop has not seen the EOF yet
        writer = _ClosedWriter()
        conn = Connection(reader, writer, host="127.0.0.1", port=0, client_id="t", request_timeout_s=30.0)
        try:
            answer = conn.submit_frame(ProduceRequestFrame(12, None, -1, 1000, [("t", 0, b"\x01" * 61)]))
            with pytest.raises(BrokerConnectionError):
                await answer
            assert conn.closed and writer.transport.aborted
            assert conn._pending == {}  # no timer left behind for a request that never went out
            # The next request fails at once too, without touching the transport.
            with pytest.raises(BrokerConnectionError):
                await conn.submit_frame(ProduceRequestFrame(12, None, -1, 1000, [("t", 0, b"")]))
        finally:
            await conn.close()

    asyncio.run(scenario())


class _ResetOnce(ScriptedBroker):
    """A broker whose connection was reset just before the first request is written: that write
    raises (as uvloop's did); the request after it is answered."""

    def __init__(self, node: int) -> None:
        super().__init__(node)
        self.refused_writes = 0

    def submit_frame(self, request):
        if not self.refused_writes:
            self.refused_writes += 1
            raise RuntimeError(CLOSED_HANDLE)
        return super().submit_frame(request)


def test_a_request_that_cannot_be_written_is_retried_and_the_sender_goes_on():
    config = ProducerConfig(batch_size=200, linger_ms=0, retry_backoff_ms=10, request_timeout_ms=1000)
    broker = _ResetOnce(0)
    network = FakeNetwork({0: broker}, 0)
    network.leaders[(TOPIC, 1)] = 0
    network.partition_counts[TOPIC] = 2
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(batch_size=200, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        # One request carries both partitions' batches; writing it fails.
        futures = [acc.try_append(TOPIC, p, 1, None, b"x" * 150, []) for p in (0, 1)]
        await asyncio.wait_for(sender.wait_idle(), 5)  # hung: the sender had ended, both in flight
        later = acc.try_append(TOPIC, 0, 1, None, b"x" * 150, [])
        await asyncio.wait_for(sender.wait_idle(), 5)
        alive = not sender._task.done()
        await sender.stop()
        return futures + [later], alive, sender.requests_in_flight()

    futures, alive, in_flight = asyncio.run(scenario())
    assert alive and in_flight == 0
    assert [f.result().partition for f in futures] == [0, 1, 0]
    # The refused request's batches were resent with their sequence numbers, then the next batch.
    assert sorted(seq for _node, _epoch, seq, _count in broker.seen) == [0, 0, 1]
    assert broker.refused_writes == 1
