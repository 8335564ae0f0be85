"""send_many: many records of one topic in one call, one future per batch; read back with
confluent-kafka from one onceflow broker."""

from __future__ import annotations

import asyncio

import pytest
from tests.client.producer.conftest import Peer, read_back
from tests.helpers.broker import BrokerProcess

from onceflow.client.partitioner import partition_for_key
from onceflow.client.producer import AsyncProducer, Producer


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("onceflow"), extra_args=("--dev",))
    proc.start()
    yield Peer("onceflow", proc.bootstrap, proc)
    proc.stop()


def test_keyed_records_go_where_send_would_put_them_in_order(peer):
    topic = peer.create_topic(4)
    n = 3000
    keys = [b"carrier-%d" % (i % 7) for i in range(n)]
    values = [b"value-%05d" % i for i in range(n)]
    with Producer({"bootstrap.servers": peer.bootstrap, "batch.size": 4096}) as producer:
        futures = producer.send_many(topic, values, keys)
        producer.flush()
        metadata = [f.result() for f in futures]
    assert len(futures) > 4  # several batches: one future per batch, not per record
    assert {m.topic for m in metadata} == {topic}
    records = read_back(peer.bootstrap, topic, n)
    assert sorted(m.value() for m in records) == values
    for message in records:
        assert message.partition() == partition_for_key(message.key(), 4)
    for partition in range(4):
        in_log = [m.value() for m in sorted(records, key=lambda m: m.offset()) if m.partition() == partition]
        assert in_log == sorted(in_log)  # each partition keeps the order of the call


def test_keyless_records_with_headers_spread_over_partitions(peer):
    topic = peer.create_topic(3)
    n = 2000
    values = [b"v%d" % i for i in range(n)]
    headers = [[("i", b"%d" % i)] if i % 2 else None for i in range(n)]
    with Producer({"bootstrap.servers": peer.bootstrap, "batch.size": 1024}) as producer:
        producer.send_many(topic, values, headers=headers)
        producer.flush()
    records = read_back(peer.bootstrap, topic, n)
    assert sorted(m.value() for m in records) == sorted(values)
    assert len({m.partition() for m in records}) > 1  # sticky moves on after a batch's worth
    for message in records:
        i = int(message.value()[1:])
        assert (message.headers() or None) == ([("i", b"%d" % i)] if i % 2 else None)


def test_small_buffer_memory_makes_send_many_wait_not_fail(peer):
    topic = peer.create_topic(1)
    n = 5000
    values = [b"x" * 100 + b"%d" % i for i in range(n)]
    settings = {"bootstrap.servers": peer.bootstrap, "batch.size": 16384, "buffer.memory": 40000}
    with Producer(settings) as producer:
        futures = producer.send_many(topic, values, partition=0)
        producer.flush()
        last = futures[-1].result()
    assert last.offset == n - 1
    records = read_back(peer.bootstrap, topic, n)
    assert [m.value() for m in sorted(records, key=lambda m: m.offset())] == values


def test_transactional_send_many_is_visible_only_when_committed(peer):
    topic = peer.create_topic(2)
    settings = {"bootstrap.servers": peer.bootstrap, "transactional.id": f"send-many-{topic}"}
    with Producer(settings) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_many(topic, [b"aborted-%d" % i for i in range(500)], [b"k%d" % i for i in range(500)])
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send_many(topic, [b"kept-%d" % i for i in range(500)], [b"k%d" % i for i in range(500)])
        producer.commit_transaction()
    records = read_back(peer.bootstrap, topic, 500, read_committed=True)
    assert sorted(m.value() for m in records) == sorted(b"kept-%d" % i for i in range(500))


def test_async_send_many_and_bad_arguments(peer):
    topic = peer.create_topic(2)

    async def run():
        async with AsyncProducer({"bootstrap.servers": peer.bootstrap}) as producer:
            with pytest.raises(ValueError, match="2 keys for 3 values"):
                await producer.send_many(topic, [b"a", b"b", b"c"], [b"k", b"l"])
            futures = await producer.send_many(topic, [b"a", b"b", b"c"], partition=1)
            return [await f for f in futures]

    metadata = asyncio.run(run())
    assert [(m.partition, m.offset) for m in metadata] == [(1, 2)]
