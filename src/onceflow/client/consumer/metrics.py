"""The consumer's metrics, with Kafka's names and groups (``consumer-fetch-manager-metrics``,
``consumer-coordinator-metrics``, ``consumer-metrics``), read by ``consumer.metrics()``.

Recorded per Fetch request, per partition per poll and per commit, never per record: records and
bytes count when ``poll`` hands them out (as Kafka's ``FetchCollector``), the lag of a partition is
its high watermark (last stable offset under read_committed) less its position after that poll.
"""

from __future__ import annotations

import time

from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.metrics import MetricsRegistry, MetricsSnapshot, Sensor, meter

FETCH_GROUP = "consumer-fetch-manager-metrics"
COORDINATOR_GROUP = "consumer-coordinator-metrics"
CONSUMER_GROUP = "consumer-metrics"


class _TopicSensors:
    __slots__ = ("records", "bytes")

    def __init__(self, registry: MetricsRegistry, topic: str, now: float) -> None:
        self.records = registry.sensor(
            FETCH_GROUP, meter("records-consumed", f"records of {topic} returned by poll"), now, topic=topic
        )
        self.bytes = registry.sensor(
            FETCH_GROUP, meter("bytes-consumed", f"bytes of {topic} returned by poll"), now, topic=topic
        )


class _PartitionSensors:
    __slots__ = ("lag", "lead", "last_lag", "last_lead")

    def __init__(self, registry: MetricsRegistry, tp: TopicPartition, now: float) -> None:
        tags = {"topic": tp.topic, "partition": str(tp.partition)}
        self.last_lag = float("nan")
        self.last_lead = float("nan")
        self.lag = registry.sensor(
            FETCH_GROUP,
            [
                ("records-lag-max", "max", "the largest lag of this partition, in records"),
                ("records-lag-avg", "avg", "the average lag of this partition, in records"),
            ],
            now,
            **tags,
        )
        self.lead = registry.sensor(
            FETCH_GROUP,
            [
                ("records-lead-min", "min", "the smallest lead of this partition over its log start"),
                ("records-lead-avg", "avg", "the average lead of this partition over its log start"),
            ],
            now,
            **tags,
        )
        registry.gauge("records-lag", FETCH_GROUP, lambda: self.last_lag, "this partition's lag now", **tags)
        registry.gauge(
            "records-lead", FETCH_GROUP, lambda: self.last_lead, "this partition's lead now", **tags
        )


class ConsumerMetrics:
    def __init__(self, client_id: str) -> None:
        self.registry = registry = MetricsRegistry(client_id)
        now = time.monotonic()
        self.records = registry.sensor(
            FETCH_GROUP, meter("records-consumed", "records returned by poll"), now
        )
        self.bytes = registry.sensor(FETCH_GROUP, meter("bytes-consumed", "bytes returned by poll"), now)
        self.fetch_latency = registry.sensor(
            FETCH_GROUP,
            [
                *meter("fetch", "Fetch requests", of_count=True),
                ("fetch-latency-avg", "avg", "ms from a Fetch request to its answer"),
                ("fetch-latency-max", "max", "the slowest Fetch request, in ms"),
            ],
            now,
        )
        self.fetch_size = registry.sensor(
            FETCH_GROUP,
            [
                ("fetch-size-avg", "avg", "bytes of record data per Fetch answer"),
                ("fetch-size-max", "max", "the most bytes of record data in one Fetch answer"),
            ],
            now,
        )
        self.lag = registry.sensor(
            FETCH_GROUP, [("records-lag-max", "max", "the largest lag of any partition, in records")], now
        )
        self.lead = registry.sensor(
            FETCH_GROUP, [("records-lead-min", "min", "the smallest lead of any partition, in records")], now
        )
        self.commits = registry.sensor(
            COORDINATOR_GROUP,
            [
                *meter("commit", "offset commits", of_count=True),
                ("commit-latency-avg", "avg", "ms an offset commit took"),
                ("commit-latency-max", "max", "the slowest offset commit, in ms"),
            ],
            now,
        )
        self.commit_sync_time = registry.sensor(
            CONSUMER_GROUP, [("commit-sync-time-ns-total", "total", "nanoseconds spent in commit()")], now
        )
        self.committed_time = registry.sensor(
            CONSUMER_GROUP, [("committed-time-ns-total", "total", "nanoseconds spent in committed()")], now
        )
        self.time_between_poll = registry.sensor(
            CONSUMER_GROUP,
            [
                ("time-between-poll-avg", "avg", "ms between two polls"),
                ("time-between-poll-max", "max", "the longest time between two polls, in ms"),
            ],
            now,
        )
        self.last_poll = 0.0
        registry.gauge(
            "last-poll-seconds-ago",
            CONSUMER_GROUP,
            lambda: time.monotonic() - self.last_poll if self.last_poll else -1.0,
            "seconds since the last poll (-1: never polled)",
        )
        self._topics: dict[str, _TopicSensors] = {}
        self._partitions: dict[TopicPartition, _PartitionSensors] = {}

    def snapshot(self) -> MetricsSnapshot:
        return self.registry.snapshot()

    def polled(self, now: float) -> None:
        if self.last_poll:
            self.time_between_poll.record((now - self.last_poll) * 1000.0, now)
        self.last_poll = now

    def fetched(self, sent: float, now: float, size: int) -> None:
        """A Fetch answer came back ``size`` bytes of record data after it was sent at ``sent``."""
        self.fetch_latency.record((now - sent) * 1000.0, now)
        self.fetch_size.record(size, now)

    def consumed(self, tp: TopicPartition, records: int, size: int, lag: int, lead: int, now: float) -> None:
        """``poll`` returned ``records`` of ``tp`` (``size`` bytes of batches it finished)."""
        topic = self._topics.get(tp.topic)
        if topic is None:
            topic = self._topics[tp.topic] = _TopicSensors(self.registry, tp.topic, now)
        topic.records.record(records, now)
        self.records.record(records, now)
        if size:
            topic.bytes.record(size, now)
            self.bytes.record(size, now)
        partition = self._partitions.get(tp)
        if partition is None:
            partition = self._partitions[tp] = _PartitionSensors(self.registry, tp, now)
        if lag >= 0:
            partition.last_lag = lag
            partition.lag.record(lag, now)
            self.lag.record(lag, now)
        if lead >= 0:
            partition.last_lead = lead
            partition.lead.record(lead, now)
            self.lead.record(lead, now)

    def unassigned(self, partitions: list[TopicPartition]) -> None:
        """Partitions given up: their per-partition metrics go (as Kafka removes them)."""
        for tp in partitions:
            if self._partitions.pop(tp, None) is not None:
                self.registry.remove_tagged(topic=tp.topic, partition=str(tp.partition))

    def committed_offsets(self, started: float, now: float) -> None:
        self.commits.record((now - started) * 1000.0, now)


def timed(sensor: Sensor, started: float) -> None:
    """Add the nanoseconds since ``started`` (``time.perf_counter()``) to a ``-time-ns-total``."""
    sensor.record((time.perf_counter() - started) * 1e9)
