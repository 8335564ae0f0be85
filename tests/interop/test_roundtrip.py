"""Every client produces with every codec; every client reads the records back unchanged."""

from __future__ import annotations

import time
import zlib

import pytest
from tests.helpers.clients import CLIENTS, CODECS, adapter, create_topic, sample_records

pytestmark = pytest.mark.interop

RECORDS_PER_CASE = 150
ONE_HOUR_MS = 3_600_000


@pytest.mark.parametrize("codec", ("none", *CODECS))
@pytest.mark.parametrize("producer", CLIENTS)
def test_records_read_back_identical_by_every_client(broker, producer, codec, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    base_ts = int(time.time() * 1000) - ONE_HOUR_MS
    sent = sample_records(
        RECORDS_PER_CASE, base_timestamp_ms=base_ts, seed=zlib.crc32(f"{producer}/{codec}".encode())
    )

    offsets = adapter(producer, broker.bootstrap).produce(unique_topic, sent, compression=codec)

    assert offsets == list(range(0, len(sent))), "a fresh partition's offsets start at 0, contiguous"
    for consumer in CLIENTS:
        got = adapter(consumer, broker.bootstrap).consume(unique_topic, len(sent))
        assert [r.offset for r in got] == offsets, f"{consumer} saw other offsets"
        assert [r.as_sent() for r in got] == sent, f"{consumer} saw other records"


@pytest.mark.parametrize("consumer", CLIENTS)
def test_fetch_from_inside_a_compressed_batch(broker, consumer, unique_topic):
    """The broker returns whole batches; the client must still start exactly at the asked offset."""
    create_topic(broker.bootstrap, unique_topic)
    sent = sample_records(100, base_timestamp_ms=int(time.time() * 1000), seed=7)
    adapter("confluent", broker.bootstrap).produce(unique_topic, sent, compression="zstd")

    got = adapter(consumer, broker.bootstrap).consume(unique_topic, 100 - 37, offset=37)

    assert [r.offset for r in got] == list(range(37, 100))
    assert [r.as_sent() for r in got] == sent[37:]


def test_appends_continue_offsets_across_producers(broker, unique_topic):
    """Two producers, one after the other: the second batch of offsets follows the first."""
    create_topic(broker.bootstrap, unique_topic)
    now = int(time.time() * 1000)
    first = adapter("kafka-python", broker.bootstrap).produce(
        unique_topic, sample_records(20, base_timestamp_ms=now, seed=1), compression="lz4"
    )
    second = adapter("aiokafka", broker.bootstrap).produce(
        unique_topic, sample_records(30, base_timestamp_ms=now, seed=2), compression="gzip"
    )
    assert first == list(range(0, 20))
    assert second == list(range(20, 50))
