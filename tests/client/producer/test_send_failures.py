"""What send() does when it cannot queue a record within max.block.ms: as Kafka's doSend, the error
(a metadata timeout, or BufferExhaustedError) is not raised but is the error of the returned future
and of the callback, and in a transaction it makes the transaction abortable. Programming errors
(a closed producer, a send outside a transaction) are still raised.

One broker for the module, with auto.create.topics.enable=false: a topic that does not exist never
gets metadata.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from tests.client.producer.conftest import read_back
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncClient
from onceflow.client.producer import (
    AsyncProducer,
    BufferExhaustedError,
    IllegalTransactionStateError,
    Producer,
    TransactionAbortableError,
)
from onceflow.client.producer.errors import ProducerClosedError
from onceflow.protocol.errors import ErrorCode, InvalidTopic, KafkaError

MAX_BLOCK_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("no-auto-create"), extra_args=["--config", "auto.create.topics.enable=false"]
    )
    proc.start()
    # The transaction coordinator's first answers can take a while on a fresh broker; let them come
    # now, under the default max.block.ms, so the short one of the tests bounds only what they test.
    with Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "warm-up"}) as producer:
        producer.init_transactions()
    yield proc
    proc.stop()


@pytest.fixture
def topic(broker) -> str:
    name = f"exists-{uuid.uuid4().hex[:8]}"

    async def create():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(name)

    asyncio.run(create())
    return name


def missing() -> str:
    return f"missing-{uuid.uuid4().hex[:8]}"


def test_a_metadata_timeout_fails_the_future_and_the_callback_not_send(broker, topic):
    absent = missing()

    async def scenario():
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "max.block.ms": MAX_BLOCK_MS})
        try:
            future = await producer.send(absent, b"v")  # does not raise
            assert future.done()
            called = []
            future.add_done_callback(lambda done: called.append((done, done.exception())))
            with pytest.raises(KafkaError) as failed:
                await future
            (many,) = await producer.send_many(absent, [b"a", b"b"])
            with pytest.raises(KafkaError) as many_failed:
                await many
            # The producer goes on.
            written = await (await producer.send(topic, b"after", partition=0))
        finally:
            await producer.close()
        with pytest.raises(ProducerClosedError):  # a programming error: raised
            await producer.send(absent, b"late")
        return failed.value, called, many_failed.value, written

    error, called, many_error, written = asyncio.run(scenario())
    assert error.code == ErrorCode.REQUEST_TIMED_OUT
    assert f"topic {absent!r} not available within max.block.ms" in str(error)
    assert len(called) == 1 and called[0][1] is error and called[0][0].done()
    assert many_error.code == ErrorCode.REQUEST_TIMED_OUT
    assert written.offset == 0
    assert [m.value() for m in read_back(broker.bootstrap, topic, 1)] == [b"after"]


def test_an_invalid_topic_fails_the_future_at_once_not_after_max_block_ms(broker, topic):
    """Kafka's waitOnMetadata throws InvalidTopicException as soon as a Metadata answer calls the topic
    invalid (Metadata.maybeThrowExceptionForTopic), and doSend fails the future with it: no wait makes
    the name valid, so max.block.ms is not spent."""

    async def scenario():
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "max.block.ms": 3_600_000})
        try:
            async with asyncio.timeout(60):  # far below max.block.ms: a send that waits it out ends here
                future = await producer.send("bad/name", b"v")
                assert future.done()
                with pytest.raises(InvalidTopic) as failed:
                    await future
                (many,) = await producer.send_many("bad/name", [b"a", b"b"])
                assert many.done()
                with pytest.raises(InvalidTopic):
                    await many
            written = await (await producer.send(topic, b"after", partition=0))  # the producer goes on
        finally:
            await producer.close()
        return failed.value, written

    error, written = asyncio.run(scenario())
    assert error.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "'bad/name'" in str(error)
    assert written.offset == 0


def test_the_blocking_producer_calls_back_in_the_caller_thread(broker):
    absent = missing()
    calls = []
    with Producer({"bootstrap.servers": broker.bootstrap, "max.block.ms": MAX_BLOCK_MS}) as producer:
        future = producer.send(
            absent, b"v", callback=lambda m, e: calls.append((m, e, threading.current_thread()))
        )
        assert future.done()
        with pytest.raises(KafkaError) as failed:
            future.get(0)
        (many,) = producer.send_many(absent, [b"a", b"b"])
        with pytest.raises(KafkaError, match="max.block.ms") as many_failed:
            many.get(0)
    with pytest.raises(ProducerClosedError):  # a programming error: raised
        producer.send(absent, b"late")
    with pytest.raises(ProducerClosedError):
        producer.send_many(absent, [b"late"])
    # Every other call too (they used to end in "RuntimeError: Event loop is closed" and a warning
    # that their coroutine was never awaited).
    for call, name in (
        (producer.flush, "flush"),
        (lambda: producer.partitions_for(absent), "partitions_for"),
    ):
        with pytest.raises(ProducerClosedError, match=rf"{name}\(\) after close"):
            call()
    assert failed.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert calls == [(None, failed.value, threading.current_thread())]
    assert many_failed.value.code == ErrorCode.REQUEST_TIMED_OUT


def _fill_buffer(producer: AsyncProducer) -> int:
    """Take what is left of buffer.memory, as batches the broker has not acknowledged yet would:
    nothing frees it until the test gives it back."""
    memory = producer._accumulator.memory
    held = memory.total - memory.used
    assert memory.try_reserve(held)
    return held


def test_a_full_buffer_fails_the_future_not_send(broker, topic):
    async def scenario():
        producer = AsyncProducer(
            {"bootstrap.servers": broker.bootstrap, "max.block.ms": MAX_BLOCK_MS, "buffer.memory": 100_000}
        )
        try:
            await (await producer.send(topic, b"first", partition=0))  # metadata known: only memory waits
            held = _fill_buffer(producer)
            refused = await producer.send(topic, b"v", partition=0)
            assert refused.done()
            with pytest.raises(BufferExhaustedError, match="max.block.ms") as failed:
                await refused
            refused_many = await producer.send_many(topic, [b"a", b"b"], partition=0)
            assert len(refused_many) == 1
            with pytest.raises(BufferExhaustedError):
                await refused_many[0]
            producer._accumulator.memory.release(held)
            written = await (await producer.send(topic, b"after", partition=0))
        finally:
            await producer.close()
        return failed.value, written

    error, written = asyncio.run(scenario())
    assert error.code == ErrorCode.REQUEST_TIMED_OUT
    assert written.offset == 1
    assert [m.value() for m in read_back(broker.bootstrap, topic, 2)] == [b"first", b"after"]


def test_a_full_buffer_with_the_blocking_producer(broker, topic):
    calls = []
    with Producer({"bootstrap.servers": broker.bootstrap, "max.block.ms": MAX_BLOCK_MS}) as producer:
        producer.send(topic, b"first", partition=0).get(30)
        held = _fill_buffer(producer.async_producer)
        refused = producer.send(topic, b"v", partition=0, callback=lambda m, e: calls.append(e))
        with pytest.raises(BufferExhaustedError) as failed:
            refused.get(0)
        (many,) = producer.send_many(topic, [b"a", b"b"], partition=0)  # waits in this thread
        with pytest.raises(BufferExhaustedError):
            many.get(0)
        producer.async_producer._accumulator.memory.release(held)
    assert calls == [failed.value]


@pytest.mark.parametrize("how", ["metadata", "metadata-send-many", "buffer"])
def test_in_a_transaction_the_failure_makes_it_abortable(broker, topic, how):
    """Kafka's doSend moves the transaction to the abortable error state (maybeTransitionToErrorState):
    the transaction's queued records fail, commit_transaction() raises TransactionAbortableError, and
    after abort_transaction() the next transaction commits."""
    absent = missing()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"send-failures-{uuid.uuid4().hex[:8]}",
            "max.block.ms": MAX_BLOCK_MS,
            "linger.ms": 60_000,  # `queued` stays in the accumulator until the failure
        }
    )
    calls = []
    try:
        producer.init_transactions()
        # Outside a transaction a send is a programming error, whether or not metadata comes.
        with pytest.raises(IllegalTransactionStateError):
            producer.send(absent, b"x")
        producer.begin_transaction()
        queued = producer.send(topic, b"queued", partition=0)
        held = 0
        if how == "metadata":
            refused = producer.send(absent, b"x", callback=lambda m, e: calls.append(e))
        elif how == "metadata-send-many":
            (refused,) = producer.send_many(absent, [b"x", b"y"])
        else:
            held = _fill_buffer(producer.async_producer)
            # Larger than batch.size: it needs a batch of its own, so buffer.memory, not room in
            # the open batch of `queued`.
            big = b"x" * (producer.config.batch_size + 1)
            refused = producer.send(topic, big, partition=0, callback=lambda m, e: calls.append(e))
        with pytest.raises(KafkaError) as failed:
            refused.get(0)
        assert failed.value.code == ErrorCode.REQUEST_TIMED_OUT
        if how != "buffer":
            with pytest.raises(TransactionAbortableError):
                queued.get(30)  # the sender failed the transaction's unsent record
        # (While a send waits for buffer.memory the accumulator hands the sender all it holds, so there
        # `queued` may have been written; the abort below takes it back.)
        with pytest.raises(TransactionAbortableError):
            producer.send(topic, b"more", partition=0)
        with pytest.raises(TransactionAbortableError, match="max.block.ms"):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.async_producer._accumulator.memory.release(held)
        producer.begin_transaction()
        producer.send(topic, b"next", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    assert calls == ([] if how == "metadata-send-many" else [failed.value])
    records = read_back(broker.bootstrap, topic, 1, read_committed=True)
    assert [m.value() for m in records] == [b"next"]


def test_a_key_or_value_that_is_not_bytes_is_named(broker, topic):
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        with pytest.raises(TypeError, match="record key must be bytes or None .*not int"):
            producer.send(topic, b"x", key=5)
        with pytest.raises(TypeError, match="record value must be bytes or None .*not str"):
            producer.send(topic, "text")
        assert producer.send(topic, b"ok", key=b"k").get(10).offset >= 0
