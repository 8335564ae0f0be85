"""The producer's metrics, with Kafka's names and groups (``producer-metrics``,
``producer-topic-metrics``), read by ``producer.metrics()``.

Everything is recorded per batch or per request, as Kafka's ``Sender`` does, so ``send()`` pays
nothing for them: records are counted when their batch goes into a Produce request (a retried batch
counts again, as in Kafka), retries and errors when a batch is retried or fails, and the latency when
a request's answer comes back. The ``-time-ns-total`` metrics add up the time spent in blocking calls
(flush, the transaction calls, waiting for metadata or buffer memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from onceflow.client.metrics import MetricsRegistry, MetricsSnapshot, Sensor, meter

GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"


class _TopicSensors:
    __slots__ = ("records", "bytes", "compression", "retries", "errors")

    def __init__(self, registry: MetricsRegistry, topic: str, now: float, compressed: bool) -> None:
        tags = {"topic": topic}
        self.records = registry.sensor(
            TOPIC_GROUP, meter("record-send", f"records sent to {topic}"), now, **tags
        )
        self.bytes = registry.sensor(TOPIC_GROUP, _byte_meter(topic), now, **tags)
        description = f"compressed over uncompressed size of {topic}'s batches"
        if compressed:
            self.compression = registry.sensor(
                TOPIC_GROUP, [("compression-rate", "avg", description)], now, **tags
            )
        else:
            self.compression = None
            registry.gauge("compression-rate", TOPIC_GROUP, _one, description, **tags)
        self.retries = registry.sensor(
            TOPIC_GROUP, meter("record-retry", f"retried record sends to {topic}"), now, **tags
        )
        self.errors = registry.sensor(
            TOPIC_GROUP, meter("record-error", f"record sends to {topic} that failed"), now, **tags
        )


def _byte_meter(topic: str) -> list[tuple[str, str, str]]:
    return [
        ("byte-rate", "rate", f"bytes sent to {topic} per second"),
        ("byte-total", "total", f"bytes sent to {topic} in total"),
    ]


class ProducerMetrics:
    """The sensors one producer records into; ``gauges`` reads the live state it does not record
    (buffer memory, requests in flight, metadata age)."""

    def __init__(self, client_id: str, *, compressed: bool = True) -> None:
        """``compressed``: whether batches are compressed (compression.type); without, the
        compression rates are 1.0 and nothing is recorded for them."""
        self.registry = registry = MetricsRegistry(client_id)
        self.compressed = compressed
        now = time.monotonic()
        self.records_per_request = registry.sensor(
            GROUP,
            [
                *meter("record-send", "records sent (each attempt of a batch counts)"),
                ("records-per-request-avg", "avg", "records per Produce request"),
            ],
            now,
        )
        self.batch_size = registry.sensor(
            GROUP,
            [
                ("batch-size-avg", "avg", "bytes per batch sent (after compression)"),
                ("batch-size-max", "max", "the largest batch sent, in bytes"),
            ],
            now,
        )
        description = "compressed over uncompressed size of the batches sent"
        if compressed:
            self.compression = registry.sensor(GROUP, [("compression-rate-avg", "avg", description)], now)
        else:
            self.compression = None
            registry.gauge("compression-rate-avg", GROUP, _one, description)
        self.queue_time = registry.sensor(
            GROUP,
            [
                ("record-queue-time-avg", "avg", "ms a batch waited in the accumulator before it was sent"),
                ("record-queue-time-max", "max", "the longest a batch waited in the accumulator, in ms"),
            ],
            now,
        )
        self.request_latency = registry.sensor(
            GROUP,
            [
                ("request-latency-avg", "avg", "ms from a Produce request written to its answer"),
                ("request-latency-max", "max", "the slowest Produce request, in ms"),
            ],
            now,
        )
        self.retries = registry.sensor(GROUP, meter("record-retry", "retried record sends"), now)
        self.errors = registry.sensor(GROUP, meter("record-error", "record sends that failed"), now)
        self.splits = registry.sensor(
            GROUP, meter("batch-split", "batches split after MESSAGE_TOO_LARGE"), now
        )
        self.flush_time = self._time_total("flush", "flush()")
        self.txn_init_time = self._time_total("txn-init", "init_transactions()")
        self.txn_begin_time = self._time_total("txn-begin", "begin_transaction()")
        self.txn_send_offsets_time = self._time_total("txn-send-offsets", "send_offsets_to_transaction()")
        self.txn_commit_time = self._time_total("txn-commit", "commit_transaction()")
        self.txn_abort_time = self._time_total("txn-abort", "abort_transaction()")
        self.metadata_wait_time = self._time_total("metadata-wait", "waiting for a topic's metadata")
        self.bufferpool_wait_time = self._time_total("bufferpool-wait", "waiting for buffer.memory")
        self._topics: dict[str, _TopicSensors] = {}

    def _time_total(self, name: str, what: str) -> Sensor:
        return self.registry.sensor(
            GROUP, [(f"{name}-time-ns-total", "total", f"nanoseconds spent in {what}")]
        )

    def gauges(self, **reads: Callable[[], float]) -> None:
        """Gauges by metric name (``buffer_available_bytes=...``: ``_`` for ``-``)."""
        for name, read in reads.items():
            metric = name.replace("_", "-")
            self.registry.gauge(metric, GROUP, read, _GAUGE_DESCRIPTIONS[metric])

    def snapshot(self) -> MetricsSnapshot:
        return self.registry.snapshot()

    def _topic(self, topic: str, now: float) -> _TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = self._topics[topic] = _TopicSensors(self.registry, topic, now, self.compressed)
        return sensors

    # -- recorded by the sender --------------------------------------------------------------------

    def request_sent(self, batches, uncompressed_sizes: list[int], now: float) -> None:
        """A Produce request went out with ``batches`` (encoded; sizes measured before encoding)."""
        records = 0
        compressed = self.compressed
        for batch, uncompressed in zip(batches, uncompressed_sizes, strict=True):
            count = batch.record_count
            size = len(batch.encoded)
            records += count
            topic = self._topics.get(batch.topic) or self._topic(batch.topic, now)
            topic.records.record(count, now)
            topic.bytes.record(size, now)
            self.batch_size.record(size, now)
            if batch.attempts == 1:  # a retry's size is its encoded size already
                if compressed:
                    ratio = size / uncompressed if uncompressed else 1.0
                    topic.compression.record(ratio, now)
                    self.compression.record(ratio, now)
                self.queue_time.record((now - batch.created) * 1000.0, now)
        self.records_per_request.record(records, now)

    def answered(self, sent: float, now: float) -> None:
        self.request_latency.record((now - sent) * 1000.0, now)

    def retried(self, batch, now: float) -> None:
        self.retries.record(batch.record_count, now)
        self._topic(batch.topic, now).retries.record(batch.record_count, now)

    def failed(self, batch, now: float) -> None:
        self.errors.record(batch.record_count, now)
        self._topic(batch.topic, now).errors.record(batch.record_count, now)


def _one() -> float:
    return 1.0


_GAUGE_DESCRIPTIONS = {
    "buffer-total-bytes": "buffer.memory: the bytes the producer may use to hold unsent records",
    "buffer-available-bytes": "bytes of buffer.memory not in use",
    "waiting-threads": "senders waiting for buffer.memory",
    "requests-in-flight": "Produce requests sent and not answered yet",
    "metadata-age": "seconds since the producer's metadata was refreshed",
}
