"""A send's future has the interface of concurrent.futures.Future: ``result(timeout)`` blocks until the
record is acknowledged (it used to raise "not acknowledged yet", and ``result(timeout=5)`` was a
TypeError), ``exception()``, ``done()``, ``cancel()`` and ``add_done_callback(fn(future))``. This is
the client's behaviour, so it runs against onceflow and against Tansu."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest
from tests.conftest import topic_name

from onceflow.client import Producer, SimpleClient
from onceflow.protocol.errors import KafkaError


@pytest.fixture(params=["onceflow", "tansu"])
def server(request):
    return request.getfixturevalue("broker" if request.param == "onceflow" else "tansu")


def test_result_waits_for_the_acknowledgement(server):
    topic = topic_name("future")
    with SimpleClient(server.bootstrap) as client:
        client.create_topic(topic, partitions=1)
    # linger.ms of a minute: nothing is sent until flush() or close(), so the wait is certain.
    with Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 60_000}) as producer:
        future = producer.send(topic, b"v", partition=0)
        assert not future.done() and future.running() and not future.cancel() and not future.cancelled()
        with pytest.raises(concurrent.futures.TimeoutError):
            future.result(timeout=0.05)
        called = []
        future.add_done_callback(lambda done: called.append((done, threading.current_thread())))
        flusher = threading.Timer(0.2, producer.flush)
        flusher.start()
        metadata = future.result(timeout=30)  # blocks until the flush got it acknowledged
        flusher.join()
        assert (metadata.topic, metadata.partition, metadata.offset) == (topic, 0, 0)
        assert future.done() and future.exception(timeout=0) is None
        assert called[0][0] is future
        late = []
        future.add_done_callback(late.append)  # already done: called at once, in this thread
        assert late == [future]


def test_a_failed_send_is_the_futures_exception(server):
    with Producer({"bootstrap.servers": server.bootstrap, "max.block.ms": 300}) as producer:
        future = producer.send(topic_name("absent") + "/bad", b"v")
        error = future.exception(timeout=30)
        assert isinstance(error, KafkaError)
        with pytest.raises(KafkaError):
            future.result(timeout=30)


def test_result_on_a_running_event_loop_says_to_await(broker):
    topic = topic_name("future-loop")
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 60_000}) as producer:
        future = producer.send(topic, b"v")

        async def inside_a_loop():
            with pytest.raises(asyncio.InvalidStateError, match="await the future"):
                future.result(timeout=1)

        asyncio.run(inside_a_loop())
        producer.flush()
        assert future.result(timeout=0).offset == 0
