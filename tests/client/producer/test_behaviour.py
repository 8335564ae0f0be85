"""The producer's behaviour suite, run against onceflow, Tansu and librdkafka's mock cluster.

Records our producer writes are read back with confluent-kafka: keys, values, headers, timestamps,
every codec, keyed partitioning identical to librdkafka's murmur2, transactions. Where a peer is known
to be wrong the test says so with an explicit xfail naming the defect; the check itself is the same.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.client.producer.conftest import read_back

from onceflow.client.producer import AsyncProducer, Producer, ProducerFencedError

pytestmark = pytest.mark.interop


def _peer_defect(request, peer, defects: dict[str, str]) -> None:
    if peer.name in defects:
        request.applymarker(pytest.mark.xfail(reason=f"{peer.name}: {defects[peer.name]}", strict=True))


def test_records_round_trip_with_keys_headers_timestamps(peer):
    topic = peer.create_topic(4)
    with Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 5}) as producer:
        futures = [
            producer.send(
                topic,
                b"value-%d" % i,
                key=b"key-%d" % i,
                headers=[("n", b"%d" % i), ("empty", None)],
                timestamp_ms=1_700_000_000_000 + i,
            )
            for i in range(200)
        ]
        producer.flush()
        metadata = [f.get(10) for f in futures]
    records = read_back(peer.bootstrap, topic, 200)
    assert len(records) == 200
    by_value = {m.value(): m for m in records}
    for i, md in enumerate(metadata):
        message = by_value[b"value-%d" % i]
        assert message.key() == b"key-%d" % i
        assert message.headers() == [("n", b"%d" % i), ("empty", None)]
        assert message.timestamp()[1] == 1_700_000_000_000 + i
        assert (message.partition(), message.offset()) == (md.partition, md.offset)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_is_read_by_confluent_kafka(peer, codec):
    topic = peer.create_topic(4)
    with Producer({"bootstrap.servers": peer.bootstrap, "compression.type": codec}) as producer:
        for i in range(300):
            producer.send(topic, b"%s-%d-" % (codec.encode(), i) * 20, key=b"%d" % i, partition=0)
        producer.flush()
    records = read_back(peer.bootstrap, topic, 300)
    assert sorted(m.value() for m in records) == sorted(
        b"%s-%d-" % (codec.encode(), i) * 20 for i in range(300)
    )
    assert [m.offset() for m in records] == list(range(300))


def test_keyed_partitions_match_librdkafka_murmur2(peer):
    from confluent_kafka import Producer as ConfluentProducer

    topic = peer.create_topic(4)
    keys = [b"user-%d" % i for i in range(64)]
    theirs = {}
    confluent = ConfluentProducer(
        {"bootstrap.servers": peer.bootstrap, "partitioner": "murmur2_random", "log_level": 3}
    )
    for key in keys:
        confluent.produce(
            topic, b"c", key=key, on_delivery=lambda err, msg: theirs.__setitem__(msg.key(), msg.partition())
        )
    confluent.flush(20)
    with Producer({"bootstrap.servers": peer.bootstrap}) as producer:
        ours = {key: producer.send(topic, b"o", key=key).get(20).partition for key in keys}
    assert len(theirs) == len(keys)
    assert ours == theirs
    assert len(set(ours.values())) > 1


def test_idempotent_batches_carry_one_producer_id_and_contiguous_sequences(peer):
    from onceflow.client.async_client import AsyncClient
    from onceflow.protocol.record_codec import decode_batches

    topic = peer.create_topic(4)

    async def scenario():
        async with AsyncProducer({"bootstrap.servers": peer.bootstrap, "batch.size": 2000}) as producer:
            futures = [await producer.send(topic, b"x" * 100, partition=0) for _ in range(100)]
            await producer.flush()
            producer_id, epoch = producer.producer_id_and_epoch
            offsets = [(await f).offset for f in futures]
        batches = []
        async with AsyncClient(peer.bootstrap) as client:
            next_offset = 0
            while next_offset < 100:  # some brokers answer one batch per fetch
                fetched = await client.fetch(topic, {0: next_offset}, max_bytes=10_000_000)
                got = list(decode_batches(fetched[0].records or b""))
                batches += got
                next_offset = got[-1].header.last_offset + 1
        return producer_id, epoch, offsets, batches

    producer_id, epoch, offsets, batches = asyncio.run(scenario())
    assert producer_id >= 0 and epoch >= 0
    assert offsets == list(range(100))
    assert len(batches) > 1  # batch.size split them
    expected_sequence = 0
    for batch in batches:
        assert (batch.header.producer_id, batch.header.producer_epoch) == (producer_id, epoch)
        assert batch.header.base_sequence == expected_sequence
        expected_sequence += batch.header.record_count
    assert expected_sequence == 100


def test_committed_transaction_is_visible_aborted_is_not(peer, request):
    _peer_defect(
        request,
        peer,
        {
            "tansu": "returns aborted records to read_committed consumers",
            "mock": "librdkafka's mock cluster does not enforce read_committed",
        },
    )
    topic = peer.create_topic(4)
    producer = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": f"tx-{topic}"})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, b"committed-%d" % i, partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, b"aborted-%d" % i, partition=i % 2)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    values = sorted(m.value() for m in read_back(peer.bootstrap, topic, 11, read_committed=True))
    assert values == sorted([b"committed-%d" % i for i in range(10)] + [b"after"])


def test_init_transactions_fences_the_older_producer(peer, request):
    _peer_defect(
        request, peer, {"mock": "librdkafka's mock cluster accepts produce and commit from a fenced epoch"}
    )
    topic = peer.create_topic(4)
    settings = {"bootstrap.servers": peer.bootstrap, "transactional.id": f"fence-{topic}"}
    old = Producer(settings)
    new = Producer(settings)
    try:
        old.init_transactions()
        new.init_transactions()
        assert new.producer_id_and_epoch[1] > old.producer_id_and_epoch[1] or (
            new.producer_id_and_epoch[0] != old.producer_id_and_epoch[0]
        )
        old.begin_transaction()
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"zombie", partition=0)
            old.commit_transaction()
        new.begin_transaction()
        new.send(topic, b"owner", partition=0)
        new.commit_transaction()
    finally:
        old.close()
        new.close()


def test_send_offsets_to_transaction_commits_the_group_offsets(peer, request):
    _peer_defect(
        request,
        peer,
        {"mock": "librdkafka's mock cluster answers TxnOffsetCommit without storing the offsets"},
    )
    from confluent_kafka import Consumer, TopicPartition

    topic = peer.create_topic(4)
    group = f"g-{topic}"
    with Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": f"offs-{topic}"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"out", partition=0)
        producer.send_offsets_to_transaction({(topic, 0): 42, (topic, 1): 7}, group)
        producer.commit_transaction()
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": group, "log_level": 3})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 42), (1, 7)]
