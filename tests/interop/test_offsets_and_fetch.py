"""ListOffsets (earliest, latest, by timestamp) and Fetch long-poll, through each client."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest
from tests.helpers.clients import CLIENTS, Sent, adapter, create_topic
from tests.helpers.wire import WireClient, build_batch, encode_request

pytestmark = pytest.mark.interop

BASE_TS = 1_700_000_000_000
COUNT = 100


@pytest.fixture(scope="module")
def timed_topic(broker) -> str:
    """100 records at timestamps BASE_TS + 13*i, in several batches."""
    topic = f"timed-{int(time.time() * 1000)}"
    create_topic(broker.bootstrap, topic)
    sent = [Sent(f"k{i}".encode(), f"v{i}".encode(), (), BASE_TS + 13 * i) for i in range(COUNT)]
    producer = adapter("confluent", broker.bootstrap)
    for start in range(0, COUNT, 25):  # four produce calls: four or more batches
        producer.produce(topic, sent[start : start + 25], compression="snappy")
    return topic


# Tansu 0.6 answers ListOffsets per batch (latest = last batch's base offset + 1), not per record.
@pytest.mark.onceflow_only
@pytest.mark.parametrize("client", CLIENTS)
def test_earliest_and_latest_offsets(broker, timed_topic, client):
    assert adapter(client, broker.bootstrap).earliest_latest(timed_topic) == (0, COUNT)


@pytest.mark.onceflow_only
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (BASE_TS - 1_000, 0),  # before everything: the first record
        (BASE_TS, 0),
        (BASE_TS + 13 * 40, 40),  # exact hit
        (BASE_TS + 13 * 40 - 5, 40),  # between records: the first one at or after it
        (BASE_TS + 13 * 60 + 1, 61),  # inside a later batch
        (BASE_TS + 13 * (COUNT - 1), COUNT - 1),
        (BASE_TS + 13 * COUNT, -1),  # after everything: no offset
    ],
)
def test_offset_for_timestamp(broker, timed_topic, client, timestamp, expected):
    assert adapter(client, broker.bootstrap).offset_for_time(timed_topic, timestamp) == expected


@pytest.mark.parametrize("client", CLIENTS)
def test_waiting_consumer_gets_a_record_produced_later(broker, client, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    got: list = []
    consumer = threading.Thread(
        target=lambda: got.extend(adapter(client, broker.bootstrap).consume(unique_topic, 1, offset=0)),
        daemon=True,
    )
    consumer.start()
    time.sleep(1.5)  # let the consumer reach its fetch loop on the empty partition
    adapter("confluent", broker.bootstrap).produce(unique_topic, [Sent(b"late", b"arrival", (), BASE_TS)])
    consumer.join(timeout=45)

    assert not consumer.is_alive()
    assert [(r.offset, r.key, r.value) for r in got] == [(0, b"late", b"arrival")]


def _fetch_request(topic: str, offset: int, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def test_fetch_is_held_until_data_arrives(broker, unique_topic):
    """A Fetch with min_bytes=1 and a long max_wait must not come back empty when a record arrives
    while it waits: the response has to carry that record."""
    create_topic(broker.bootstrap, unique_topic)
    with WireClient(broker.bootstrap) as fetcher, WireClient(broker.bootstrap) as producer_conn:
        fetcher.send_raw(
            encode_request(_fetch_request(unique_topic, 0, max_wait_ms=20_000), 12, correlation_id=77)
        )
        time.sleep(0.5)  # the fetch is parked on the broker now
        produce = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=unique_topic,
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=0, records=build_batch([(b"k", b"woke the fetch")])
                        )
                    ],
                )
            ],
        )
        produced = producer_conn.request(produce, version=9)
        assert produced.responses[0].partition_responses[0].error_code == 0

        response = FetchResponse.decode(fetcher.recv_frame(), version=12, header=True)

    assert response.header.correlation_id == 77
    (topic_response,) = response.responses
    (partition,) = topic_response.partitions
    assert partition.error_code == 0
    assert partition.high_watermark == 1
    assert b"woke the fetch" in bytes(partition.records or b"")
