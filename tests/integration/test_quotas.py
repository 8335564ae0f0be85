"""A produce quota on a real broker, driven by confluent-kafka (librdkafka honours KIP-219 throttle
times): the throttled client-id's rate over 10 s comes within 20% of its quota, its answers carry
throttle times, and another client-id producing at the same time is not slowed.

The rate check is a property of throttling itself (Kafka's arithmetic over the sample windows lets a
client average its quota), not a speed target; it is bounded in time (~15 s).
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
# Before the broker's first throttle the client sends what its sample windows allow at once; the rate
# is measured over the MEASURE_S after this warm-up, where throttling holds it (Kafka's quotas bound
# the average over the windows, not the first burst).
WARM_UP_S = 3.0
# Kafka lets a client that has been quiet send (quota.window.num - 1) windows' worth at once, and again
# each time a window holding such a burst leaves the horizon: with Kafka's 11 windows of 1 s, a 10 s
# measurement holds one ~10 MB burst or none, anywhere from ~0.9 to ~1.2 times the quota. Three
# windows keep the bursts to ~2 s of quota, so the average over 10 s shows the throttling itself.
QUOTA_WINDOWS = ("--config", "quota.window.num=3")
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

    def produce_for(
        self, topic: str, seconds: float, max_bytes: int = 2**62, warm_up: float = 0.0
    ) -> tuple[int, float]:
        """Produce as fast as the producer takes records for ``warm_up + seconds`` or until
        ``max_bytes`` are delivered; returns the bytes delivered after the warm-up and the seconds
        that took (what was still queued is flushed after)."""
        start = time.monotonic()
        measured_from: tuple[float, int] | None = None if warm_up else (start, 0)
        sent = 0
        while time.monotonic() - start < warm_up + seconds and self.delivered < max_bytes:
            if measured_from is None and time.monotonic() - start >= warm_up:
                measured_from = (time.monotonic(), self.delivered)
            if sent < max_bytes:
                try:
                    self.producer.produce(topic, RECORD, partition=0, on_delivery=self._delivered)
                    sent += len(RECORD)
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        assert measured_from is not None, "the producer stopped during its warm-up"
        elapsed = time.monotonic() - measured_from[0]
        delivered = self.delivered - measured_from[1]
        self.producer.flush(30)
        return delivered, elapsed


def test_a_produce_quota_holds_one_client_id_to_its_rate_and_leaves_another_alone(tmp_path):
    with BrokerProcess(tmp_path / "broker", extra_args=QUOTA_WINDOWS) as broker:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topic("quota-throttled", partitions=1)
            admin.create_topic("quota-free", partitions=1)
            admin.alter_client_quotas({"client-id": "throttled"}, {"producer_byte_rate": QUOTA})
        throttled = MeteredProducer(broker.bootstrap, "throttled")
        free = MeteredProducer(broker.bootstrap, "free")
        results: dict[str, tuple[int, float]] = {}

        def run_throttled() -> None:
            results["throttled"] = throttled.produce_for("quota-throttled", MEASURE_S, warm_up=WARM_UP_S)

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
