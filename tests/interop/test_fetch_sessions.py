"""kafka-python's consumer fetches in incremental fetch sessions (KIP-227, its FetchSessionHandler):
reading several partitions over many fetches while records (and transactions) arrive, it must get
every record exactly once, and the broker must be seen to serve it incrementally.

The broker runs in this process (its loop in the test's thread, the blocking clients in worker
threads), so the test reads the broker's own session counters.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from tests.broker.raw_client import RawClient, build_batch, running_broker
from tests.broker.test_produce_fetch import produce_request

pytestmark = [pytest.mark.interop, pytest.mark.onceflow_only]

kafka = pytest.importorskip("kafka")
PARTITIONS = 4
DEADLINE_S = 90.0


class _Complaints(logging.Handler):
    """kafka-python's fetcher logs at INFO when a fetch answer breaks the session protocol
    ("invalid full fetch response", "unable to process the fetch request"): collect those."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "invalid" in message or "unable to process" in message:
            self.messages.append(message)


@pytest.fixture
def fetcher_complaints():
    handler = _Complaints()
    logger = logging.getLogger("kafka.consumer.fetcher")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def read_with_kafka_python(port: int, topic: str, total: int, isolation_level: str) -> dict[int, list]:
    """(offset, value) per partition, read from the beginning until ``total`` records came (plus half
    a second more, so a duplicate after the last one would show)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
        max_partition_fetch_bytes=1024,  # about one batch per partition per fetch: many fetches
        fetch_max_wait_ms=100,
        max_poll_records=7,  # records stay buffered, so the fetcher forgets and re-adds partitions
        request_timeout_ms=30_000,
    )
    assert consumer.config["enable_incremental_fetch_sessions"]
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    done_at = None
    try:
        while time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=100).items():
                got[tp.partition].extend((r.offset, r.value) for r in records)
            count = sum(len(v) for v in got.values())
            if count >= total and done_at is None:
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > 0.5:
                break
    finally:
        consumer.close()
    return got


def test_kafka_python_reads_everything_once_through_incremental_fetches(tmp_path, fetcher_complaints):
    batches_before, batches_during, per_batch = 20, 30, 5

    async def produce_batches(client: RawClient, topic: str, first: int, count: int, pause: float):
        for i in range(first, first + count):
            for p in range(PARTITIONS):
                values = [b"p%d-b%d-r%d" % (p, i, r) + b"." * 60 for r in range(per_batch)]
                response = await client.request(produce_request(topic, {p: build_batch(values)}), 9)
                assert response.responses[0].partition_responses[0].error_code == 0
            await asyncio.sleep(pause)

    async def scenario():
        async with running_broker(tmp_path) as broker:
            topic = "sessions"
            broker.topics.create_topic(topic, PARTITIONS)
            producer = await RawClient.connect(broker.port)
            await produce_batches(producer, topic, 0, batches_before, 0)
            total = PARTITIONS * (batches_before + batches_during) * per_batch
            reader = asyncio.create_task(
                asyncio.to_thread(read_with_kafka_python, broker.port, topic, total, "read_uncommitted")
            )
            await produce_batches(producer, topic, batches_before, batches_during, 0.02)  # during the read
            got = await asyncio.wait_for(reader, DEADLINE_S + 30)
            await producer.close()
            return got, broker.services.fetch_sessions.stats

    got, stats = asyncio.run(scenario())
    for p in range(PARTITIONS):
        expected = [
            b"p%d-b%d-r%d" % (p, i, r) + b"." * 60
            for i in range(batches_before + batches_during)
            for r in range(per_batch)
        ]
        assert [offset for offset, _ in got[p]] == list(range(len(expected))), f"partition {p}"
        assert [value for _, value in got[p]] == expected, f"partition {p}"
    # kafka-python opened one session and fetched incrementally ever after (50 batches a partition,
    # at most two of them fit one fetch's 1024 bytes: at least 25 fetches), never finding an answer wrong.
    assert (stats.full_fetches, stats.sessions_created) == (1, 1), stats
    assert stats.incremental_fetches >= 20, stats
    assert stats.session_errors == 0, stats
    assert fetcher_complaints == []


def test_kafka_python_read_committed_in_a_session_sees_only_committed_transactions(
    tmp_path, fetcher_complaints
):
    """Transactions from librdkafka (every third one aborted) land on every partition while
    kafka-python reads read_committed through incremental fetches: it must see exactly the committed
    records, so no answer may drop an aborted-transaction list or a partition with new data."""
    ck = pytest.importorskip("confluent_kafka")
    transactions, per_partition = 24, 10  # one transaction's batch (~800 bytes) per partition per fetch

    def value(t: int, p: int, r: int) -> bytes:
        return b"t%d-p%d-r%d" % (t, p, r) + b"." * 60

    def run_transactions(port: int, topic: str) -> None:
        producer = ck.Producer(
            {"bootstrap.servers": f"127.0.0.1:{port}", "transactional.id": "sessions-txn", "linger.ms": 2}
        )
        producer.init_transactions(30)
        for t in range(transactions):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                for r in range(per_partition):
                    producer.produce(topic, value(t, p, r), partition=p)
            producer.flush(30)
            if t % 3 == 2:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
            time.sleep(0.02)

    committed = [t for t in range(transactions) if t % 3 != 2]

    async def scenario():
        async with running_broker(tmp_path) as broker:
            topic = "sessions-rc"
            broker.topics.create_topic(topic, PARTITIONS)
            total = len(committed) * PARTITIONS * per_partition
            reader = asyncio.create_task(
                asyncio.to_thread(read_with_kafka_python, broker.port, topic, total, "read_committed")
            )
            await asyncio.to_thread(run_transactions, broker.port, topic)
            got = await asyncio.wait_for(reader, DEADLINE_S + 30)
            return got, broker.services.fetch_sessions.stats

    got, stats = asyncio.run(scenario())
    for p in range(PARTITIONS):
        expected = [value(t, p, r) for t in committed for r in range(per_partition)]
        assert [v for _, v in got[p]] == expected, f"partition {p}"
        offsets = [offset for offset, _ in got[p]]
        assert offsets == sorted(set(offsets))  # no record twice
    assert (stats.full_fetches, stats.sessions_created) == (1, 1), stats
    assert stats.incremental_fetches >= 20, stats
    assert stats.session_errors == 0, stats
    assert fetcher_complaints == []
