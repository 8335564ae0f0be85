"""A compacted table under kill -9: an idempotent producer keeps updating and deleting keys while the
log cleaner rewrites small segments every 100 ms and the broker is killed and restarted at random
(so some kills land in the middle of a cleaning or of a segment swap). At the end every key must
read back as its last write: no acknowledged update lost, no older value brought back, no deleted key
resurrected (tombstones go at once here: delete.retention.ms=0)."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.helpers.broker import BrokerProcess

pytestmark = [pytest.mark.slow, pytest.mark.onceflow_only]

KEYS = 300
SECONDS = 25
TOPIC = "table"


def _read_table(bootstrap: str) -> tuple[dict[bytes, bytes], int]:
    """The table as a consumer rebuilds it from the start (tombstones delete), and how many records
    it read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "table-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    table: dict[bytes, bytes] = {}
    count = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if consumer.position([TopicPartition(TOPIC, 0)])[0].offset >= end:
                    break
                continue
            if message.error():
                continue
            count += 1
            if message.value() is None:
                table.pop(message.key(), None)
            else:
                table[message.key()] = message.value()
            if message.offset() >= end - 1:
                break
    finally:
        consumer.close()
    return table, count


def test_a_compacted_table_survives_kill9_during_cleaning(tmp_path):
    rng = random.Random(7)
    broker = BrokerProcess(tmp_path / "data", extra_args=("--config", "log.cleaner.backoff.ms=100"))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": "65536",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0",
        }
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
            future.result(30)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.size": 8192,  # batches must fit a segment (else RECORD_LIST_TOO_LARGE, as in Kafka)
                "delivery.timeout.ms": 120000,
            }
        )
        failed: list[str] = []

        def delivered(err, _msg):
            if err is not None:
                failed.append(err.name())

        last: dict[bytes, bytes | None] = {}
        writes = 0
        kills = 0
        started = time.monotonic()
        next_kill = started + rng.uniform(2, 4)
        while time.monotonic() - started < SECONDS:
            key = b"k%03d" % rng.randrange(KEYS)
            value = None if rng.random() < 0.1 else b"v%07d" % writes
            try:
                producer.produce(TOPIC, key=key, value=value, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
                continue
            last[key] = value
            writes += 1
            producer.poll(0)
            if writes % 50 == 0:
                time.sleep(0.005)  # a few thousand updates a second, not a flood
            if time.monotonic() > next_kill:
                broker.kill9()
                broker.restart()
                kills += 1
                next_kill = time.monotonic() + rng.uniform(2, 4)
        assert producer.flush(120) == 0
        assert failed == [], f"deliveries failed: {failed[:5]}"
        assert kills >= 3
        time.sleep(1.5)  # the cleaner's last passes over what was written last
        table, read = _read_table(broker.bootstrap)
        expected = {key: value for key, value in last.items() if value is not None}
        assert table == expected, (
            f"{sum(1 for k in expected if table.get(k) != expected[k])} keys differ, "
            f"{len(set(table) - set(expected))} resurrected"
        )
        assert read < writes / 2, f"read {read} of {writes} writes: the cleaner did not compact"
        broker_log = broker.log_path.read_text(errors="replace")
        print(
            f"compacted table: {writes} writes, {kills} kill -9s, {read} records read back, "
            f"{broker_log.count('cleaned table-0:')} cleanings, "
            f"{broker_log.count('finishing the install')} swaps finished after a crash"
        )
        assert "cleaned table-0" in broker_log
    finally:
        broker.stop()
