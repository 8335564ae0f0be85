"""A produce quota on a real broker, driven by confluent-kafka (librdkafka honours KIP-219 throttle
times): the throttled client-id's rate over 10 s comes within 20% of its quota, its answers carry
throttle times, and another client-id producing at the same time is not slowed.

The rate check is a property of throttling itself (Kafka's arithmetic over the sample windows lets a
client average its quota), not a speed target; it is bounded in time (~12 s).
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from tests.helpers.broker import BrokerProcess

from onceflow.client.admin import AdminClient

pytestmark = pytest.mark.slow

MB = 1 << 20
QUOTA = MB  # bytes per second
MEASURE_S = 10.0
RECORD = bytes(10_000)


class MeteredProducer:
    """A confluent-kafka producer that counts the bytes delivered and the throttle times it got."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.delivered = 0
        self.errors: list[str] = []
        self.throttle_ms: list[int] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "acks": 1,
                "linger.ms": 5,
                "batch.size": 64 * 1024,
                "queue.buffering.max.kbytes": 8 * 1024,
                "throttle_cb": lambda event: self.throttle_ms.append(event.throttle_time * 1000),
            }
        )

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered += len(msg.value())

    def produce_for(self, topic: str, seconds: float, max_bytes: int = 2**62) -> tuple[int, float]:
        """Produce as fast as the producer takes records for ``seconds`` or until ``max_bytes`` are
        delivered; returns the bytes delivered by then and the seconds it took (what was still queued
        is flushed after)."""
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds and self.delivered < max_bytes:
            if sent < max_bytes:
                try:
                    self.producer.produce(topic, RECORD, partition=0, on_delivery=self._delivered)
                    sent += len(RECORD)
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        elapsed = time.monotonic() - start
        delivered = self.delivered
        self.producer.flush(30)
        return delivered, elapsed


def test_a_produce_quota_holds_one_client_id_to_its_rate_and_leaves_another_alone(tmp_path):
    with BrokerProcess(tmp_path / "broker") as broker:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topic("quota-throttled", partitions=1)
            admin.create_topic("quota-free", partitions=1)
            admin.alter_client_quotas({"client-id": "throttled"}, {"producer_byte_rate": QUOTA})
        throttled = MeteredProducer(broker.bootstrap, "throttled")
        free = MeteredProducer(broker.bootstrap, "free")
        results: dict[str, tuple[int, float]] = {}

        def run_throttled() -> None:
            results["throttled"] = throttled.produce_for("quota-throttled", MEASURE_S)

        thread = threading.Thread(target=run_throttled)
        thread.start()
        try:
            time.sleep(1.0)  # while the throttled client is at it
            free_bytes, free_s = free.produce_for("quota-free", MEASURE_S, max_bytes=30 * MB)
        finally:
            thread.join(60)
        assert throttled.errors == [] and free.errors == []
        throttled_bytes, throttled_s = results["throttled"]
        rate = throttled_bytes / throttled_s
        assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, rate / QUOTA
        assert throttled.throttle_ms and max(throttled.throttle_ms) > 0  # answers carried throttle times
        assert free.throttle_ms == []  # never throttled
        assert free_bytes >= 30 * MB and free_bytes / free_s > 3 * QUOTA
