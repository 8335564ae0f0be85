"""A consumer whose broker goes away (kill -9) keeps to its timeouts, as Kafka's consumers do: poll
returns no records at its deadline however often it is called, while a rejoin and an auto commit
wait for a coordinator nobody answers for; commit() and committed() give up with ConsumerTimeout,
close() within its timeout. Once the broker is back the member rejoins and reads on. Both group
protocols, the async consumer and the blocking one. One broker for the module, killed and restarted
by the tests."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncClient
from onceflow.client.consumer import AsyncConsumer, Consumer, ConsumerTimeout
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer import AsyncProducer

PROTOCOLS = ["classic", "consumer"]
# A liveness guard, not a timing assert: a poll with a 500 ms timeout must come back at all.
RETURNS_WITHIN_S = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("unreachable-coordinator"),
        extra_args=[
            "--config",
            "group.initial.rebalance.delay.ms=0",
            "--config",
            "group.consumer.heartbeat.interval.ms=200",
        ],
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def live(broker):
    """The module's broker, running at the start and at the end of each test."""
    if not broker.running:
        broker.restart()
    yield broker
    if not broker.running:
        broker.restart()


def settings(bootstrap: str, group: str, protocol: str) -> dict:
    extra = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200} if protocol == "classic" else {}
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 100,  # an auto commit is due at every poll while the broker is down
        **extra,
    }


async def fill(bootstrap: str, topic: str, values: list[bytes], *, create: bool = True) -> None:
    if create:
        async with AsyncClient(bootstrap) as client:
            await client.create_topic(topic, partitions=2)
    async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
        await asyncio.gather(*[await producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)])


async def returns(awaitable, what: str):
    try:
        return await asyncio.wait_for(awaitable, RETURNS_WITHIN_S)
    except TimeoutError:
        raise AssertionError(f"{what} did not return within {RETURNS_WITHIN_S} s") from None


async def poll_until(c: AsyncConsumer, condition, read: list, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for records"
        read.extend(await c.poll(timeout_ms=200))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_polls_return_nothing_while_the_broker_is_down_and_the_member_rejoins_after(live, protocol, caplog):
    caplog.set_level(logging.DEBUG, logger="onceflow.client.consumer.fetcher")
    topic, later, group = topic_name("down-a"), topic_name("down-b"), topic_name("down-g")
    first = [b"a-%d" % i for i in range(10)]

    async def run():
        await fill(live.bootstrap, topic, first)
        async with AsyncClient(live.bootstrap) as client:
            await client.create_topic(later, partitions=2)
        c = AsyncConsumer(topic, config=settings(live.bootstrap, group, protocol))
        read: list = []
        try:
            await poll_until(c, lambda: len(read) == 10, read)
            await c.commit()
            await asyncio.to_thread(live.kill9)
            c.subscribe([topic, later])  # a rejoin is due now, with no coordinator to answer it
            while_down = [await returns(c.poll(timeout_ms=500), "poll(timeout_ms=500)") for _ in range(4)]
            await asyncio.to_thread(live.restart)
            await fill(live.bootstrap, later, [b"b-%d" % i for i in range(6)], create=False)
            await poll_until(c, lambda: len(read) == 16, read)
            return while_down, read, c.assignment()
        finally:
            if not live.running:
                await asyncio.to_thread(live.restart)
            await c.close()

    while_down, read, assignment = asyncio.run(run())
    assert while_down == [[], [], [], []]
    assert sorted(r.value for r in read) == sorted(first + [b"b-%d" % i for i in range(6)])
    assert len({(r.topic, r.partition, r.offset) for r in read}) == 16  # none twice
    assert assignment == {TP(t, p) for t in (topic, later) for p in (0, 1)}
    # The fetcher retried every retry.backoff.ms while the broker was down: the outage is one WARNING
    # when it starts and an INFO when it ends, the retries are DEBUG (not ~20 warnings a second).
    fetch_failed = [r for r in caplog.records if r.getMessage().startswith("fetch from node")]
    failed = [r for r in fetch_failed if "failed" in r.getMessage()]
    assert len(failed) > 1
    assert [r.levelno for r in failed].count(logging.WARNING) == 1
    assert any(r.getMessage().endswith("works again") for r in fetch_failed)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_blocking_consumer_polls_within_its_timeout_while_the_broker_is_down(live, protocol):
    topic, later, group = topic_name("down-sync-a"), topic_name("down-sync-b"), topic_name("down-sync-g")
    asyncio.run(fill(live.bootstrap, topic, [b"%d" % i for i in range(6)]))
    asyncio.run(fill(live.bootstrap, later, [], create=True))
    c = Consumer(topic, config=settings(live.bootstrap, group, protocol))

    def poll_in_thread(timeout_ms: int) -> list:
        """poll() from a daemon thread, so a poll that never returns fails the test instead of hanging it."""
        result: list = []
        thread = threading.Thread(target=lambda: result.append(c.poll(timeout_ms=timeout_ms)), daemon=True)
        thread.start()
        thread.join(RETURNS_WITHIN_S)
        assert not thread.is_alive(), (
            f"poll(timeout_ms={timeout_ms}) did not return within {RETURNS_WITHIN_S} s"
        )
        return result[0]

    try:
        read: list = []
        deadline = time.monotonic() + 60
        while len(read) < 6 and time.monotonic() < deadline:
            read.extend(c.poll(timeout_ms=200))
        c.commit()
        live.kill9()
        c.subscribe([topic, later])
        while_down = [poll_in_thread(500) for _ in range(4)]
        live.restart()
        asyncio.run(fill(live.bootstrap, later, [b"later-%d" % i for i in range(4)], create=False))
        while len(read) < 10 and time.monotonic() < deadline + 60:
            read.extend(c.poll(timeout_ms=200))
    finally:
        if not live.running:
            live.restart()
        c.close()
    assert while_down == [[], [], [], []]
    assert sorted(r.value for r in read) == sorted(
        [b"%d" % i for i in range(6)] + [b"later-%d" % i for i in range(4)]
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_commit_committed_and_close_give_up_while_the_broker_is_down(live, protocol):
    topic, group = topic_name("down-commit"), topic_name("down-commit-g")

    async def run():
        await fill(live.bootstrap, topic, [b"%d" % i for i in range(4)])
        config = settings(live.bootstrap, group, protocol) | {"default.api.timeout.ms": 1000}
        c = AsyncConsumer(topic, config=config)
        read: list = []
        try:
            await poll_until(c, lambda: len(read) == 4, read)
            await asyncio.to_thread(live.kill9)
            with pytest.raises(ConsumerTimeout) as commit_failed:
                await returns(c.commit(), "commit()")  # default.api.timeout.ms
            with pytest.raises(ConsumerTimeout):
                await returns(c.committed([TP(topic, 0)], timeout_ms=500), "committed()")
        finally:
            await returns(c.close(timeout_ms=1000), "close(timeout_ms=1000)")
        return commit_failed.value

    error = asyncio.run(run())
    assert error.retriable and "did not complete in time" in str(error)
