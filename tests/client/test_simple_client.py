"""SimpleClient against a real onceflow broker (one per module): admin, produce, fetch, offsets."""

import importlib.util

import pytest

from onceflow.client.simple import SimpleClient
from onceflow.protocol.errors import ErrorCode, KafkaError, UnknownTopicOrPartition

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("onceflow.broker.server") is None,
    reason="onceflow.broker.server is not built yet",
)


@pytest.fixture(scope="module")
def client(broker):
    with SimpleClient(broker.bootstrap) as c:
        yield c


def test_create_describe_list_delete(client, make_topic):
    name = make_topic("admin")
    client.create_topic(name, partitions=3, configs={"retention.ms": "60000"})
    assert name in client.list_topics()
    info, configs = client.describe_topic(name)
    assert sorted(info.partitions) == [0, 1, 2]
    assert configs.get("retention.ms") == "60000"
    with pytest.raises(KafkaError) as dup:
        client.create_topic(name)
    assert dup.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    client.delete_topic(name)
    assert name not in client.list_topics()
    with pytest.raises(UnknownTopicOrPartition):
        client.describe_topic(name)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume_every_codec(client, make_topic, compression):
    name = make_topic(compression)
    client.create_topic(name, partitions=2)
    sent = [(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(500)]
    results = client.produce(name, sent, compression=compression, batch_size=2048)
    assert sum(n for _p, _r, n in results) == 500
    assert len(results) > 2  # batch_size splits the records
    got = list(client.consume(name, max_messages=500, timeout_s=10))
    assert sorted((r.key, r.value) for r in got) == sorted(sent)
    # Keys hash to partitions; each partition's offsets are dense from 0.
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))


def test_keyed_records_stay_in_one_partition_in_order(client, make_topic):
    name = make_topic("keyed")
    client.create_topic(name, partitions=3)
    client.produce(name, [(b"same-key", f"{i}".encode()) for i in range(50)], batch_size=100)
    got = list(client.consume(name, max_messages=50, timeout_s=10))
    assert len({r.partition for r in got}) == 1
    assert [r.value for r in got] == [f"{i}".encode() for i in range(50)]


def test_explicit_partition_acks_and_offsets(client, make_topic):
    name = make_topic("offsets")
    client.create_topic(name, partitions=2)
    results = client.produce(name, [(None, b"a"), (None, b"b")], partition=1, acks=1)
    assert [(p, r.base_offset, n) for p, r, n in results] == [(1, 0, 2)]
    assert client.produce(name, [(None, b"c")], partition=1, acks=0)[0][1] is None
    got = list(client.consume(name, max_messages=3, timeout_s=10))
    assert [r.value for r in got] == [b"a", b"b", b"c"]
    assert client.list_offsets(name) == {0: 0, 1: 3}
    assert client.list_offsets(name, timestamp=-2) == {0: 0, 1: 0}


def test_consume_from_end_sees_only_new_records(client, make_topic):
    name = make_topic("tail")
    client.create_topic(name)
    client.produce(name, [(None, b"old")])
    assert list(client.consume(name, from_beginning=False, timeout_s=0.5)) == []


def test_unknown_topic_is_reported(client):
    with pytest.raises(UnknownTopicOrPartition, match="no-such-topic"):
        list(client.consume("no-such-topic", timeout_s=1))
