"""Client metrics: the sensors' arithmetic (rates over windows, averages, maxima), and against a real
broker the producer's and consumer's counters moving by exactly what the test produced, retried,
refused, consumed and committed; then the same numbers read back through Prometheus."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.consumer.structs import TopicPartition
from onceflow.client.metrics import MetricName, MetricsSnapshot, Sensor
from onceflow.client.producer import ClientFaults
from onceflow.client.prometheus import serve_metrics

# -- sensors (no broker) ---------------------------------------------------------------------------


def test_sensor_total_avg_max_and_a_young_clients_rate():
    sensor = Sensor(now=0.0)
    for value in (10, 20, 30):
        sensor.record(value, now=1.0)
    assert sensor.total == 60 and sensor.count == 3
    assert sensor.avg(now=1.0) == 20 and sensor.max(now=1.0) == 30 and sensor.min(now=1.0) == 10
    # Kafka counts at least one whole 30 s window of elapsed time: 60 over 31 s, not over 1 s.
    assert sensor.rate(now=1.0) == pytest.approx(60 / 31)
    assert sensor.rate(now=1.0, of_count=True) == pytest.approx(3 / 31)


def test_sensor_windows_age_out_but_the_total_stays():
    sensor = Sensor(now=0.0)
    sensor.record(5, now=0.0)
    sensor.record(7, now=35.0)  # a second window
    assert sensor.max(now=35.0) == 7 and sensor.avg(now=35.0) == 6
    sensor.record(1, now=70.0)  # a third: the first is dropped
    assert sensor.avg(now=70.0) == 4 and sensor.max(now=70.0) == 7
    assert math.isnan(Sensor(now=0.0).avg(now=1.0))
    later = 200.0  # nothing recorded for more than two windows
    assert sensor.rate(now=later) == 0.0 and math.isnan(sensor.max(now=later))
    assert sensor.total == 13


def test_snapshot_value_finds_one_metric_by_name_and_tags():
    snapshot = MetricsSnapshot(
        {
            MetricName("record-send-total", "producer-metrics", (("client-id", "p"),)): 5.0,
            MetricName(
                "record-send-total", "producer-topic-metrics", (("client-id", "p"), ("topic", "a"))
            ): 3.0,
            MetricName(
                "record-send-total", "producer-topic-metrics", (("client-id", "p"), ("topic", "b"))
            ): 2.0,
        }
    )
    assert snapshot.value("record-send-total") == 5.0
    assert snapshot.value("record-send-total", topic="b") == 2.0
    with pytest.raises(KeyError):
        snapshot.value("record-send-total", group="producer-topic-metrics")  # two match
    with pytest.raises(KeyError):
        snapshot.value("no-such-metric")


# -- against a broker --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bootstrap(broker) -> str:
    return broker.bootstrap


def _topic(bootstrap: str, name: str, partitions: int = 2) -> str:
    with AdminClient(bootstrap) as admin:
        admin.create_topic(name, partitions=partitions)
    return name


def test_producer_counts_exactly_the_records_it_sent(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-produce"))
    with Producer(
        {"bootstrap.servers": bootstrap, "client.id": "metrics-p1", "compression.type": "gzip"}
    ) as producer:
        before = producer.metrics()
        assert before.value("record-send-total") == 0
        for i in range(300):
            producer.send(topic, b"x" * 200, key=str(i).encode())
        producer.send_many(topic, [b"y" * 100] * 200)
        producer.flush()
        m = producer.metrics()
    assert m.value("record-send-total") == 500
    assert m.value("record-send-total", topic=topic) == 500
    assert m.value("record-error-total") == 0 and m.value("record-retry-total") == 0
    assert m.value("record-send-rate") > 0
    assert m.value("batch-size-avg") > 0 and m.value("batch-size-max") >= m.value("batch-size-avg")
    assert 0 < m.value("compression-rate-avg") < 1  # gzip of repeated bytes
    assert m.value("request-latency-avg") >= 0 and not math.isnan(m.value("request-latency-max"))
    assert m.value("buffer-available-bytes") == m.value("buffer-total-bytes") == 33554432
    assert m.value("requests-in-flight") == 0
    assert m.value("flush-time-ns-total") > 0
    assert m.value("metadata-wait-time-ns-total") > 0  # the first send waited for the topic
    assert m.value("byte-total", topic=topic) > 0
    tags = {metric.tag_dict["client-id"] for metric in m}
    assert tags == {"metrics-p1"}


def test_producer_counts_retries_and_refused_records(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-retry"), partitions=1)
    faults = ClientFaults()
    faults.plan("drop-request", [1])  # the first Produce request is lost: its batch is retried
    with Producer(
        {"bootstrap.servers": bootstrap, "request.timeout.ms": 500, "max.request.size": 2000},
        faults=faults,
    ) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=0) for i in range(10)]
        producer.flush()
        assert all(f.get(10).offset >= 0 for f in futures)
        refused = producer.send(topic, b"z" * 5000)  # larger than max.request.size
        with pytest.raises(Exception, match="max.request.size"):
            refused.get(10)
        m = producer.metrics()
    assert m.value("record-retry-total") == 10
    assert m.value("record-retry-total", topic=topic) == 10
    assert m.value("record-send-total") == 20  # each attempt of the batch counts, as in Kafka
    assert m.value("record-error-total") == 1
    assert m.value("compression-rate-avg") == 1.0  # not compressed: nothing recorded, the rate is 1
    assert m.value("compression-rate", topic=topic) == 1.0


def test_transactional_producer_times_its_transaction_calls(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-txn"), partitions=1)
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": make_topic("tid")}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
        m = producer.metrics()
        assert m.value("txn-init-time-ns-total") > 0 and m.value("txn-commit-time-ns-total") > 0
        assert m.value("txn-abort-time-ns-total") == 0
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.flush()  # sent, then aborted (an unsent record is not counted as sent)
        producer.abort_transaction()
        m = producer.metrics()
    assert m.value("txn-abort-time-ns-total") > 0 and m.value("txn-begin-time-ns-total") > 0
    assert m.value("record-send-total") == 2


def test_consumer_counts_records_lag_and_commits(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-consume"))
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(120):
            producer.send(topic, b"r%d" % i, partition=i % 2)
        producer.flush()
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=make_topic("metrics-group"),
        client_id="metrics-c1",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=50,
    )
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = consumer.poll(timeout_ms=5000)
        m = consumer.metrics()
        # After a partial poll the lag of what is left shows (at most 50 taken of 120).
        assert m.value("records-consumed-total") == len(got) <= 50
        assert m.value("records-lag-max") > 0
        while len(got) < 120:
            got += consumer.poll(timeout_ms=5000)
        assert len(got) == 120
        consumer.commit()
        consumer.commit({TopicPartition(topic, 0): 60})
        consumer.committed(TopicPartition(topic, 0))
        m = consumer.metrics()
    finally:
        consumer.close()
    assert m.value("records-consumed-total") == 120
    assert m.value("records-consumed-total", topic=topic) == 120
    assert m.value("records-lag", topic=topic, partition=0) == 0
    assert m.value("records-lag", topic=topic, partition=1) == 0
    assert m.value("records-lead", topic=topic, partition=0) == 60
    assert m.value("bytes-consumed-total") > 0 and m.value("fetch-total") >= 1
    assert m.value("fetch-latency-avg") >= 0 and m.value("fetch-size-max") > 0
    assert m.value("commit-total") == 2
    assert m.value("commit-latency-max") >= m.value("commit-latency-avg") >= 0
    assert m.value("commit-sync-time-ns-total") > 0 and m.value("committed-time-ns-total") > 0
    assert m.value("last-poll-seconds-ago") >= 0


def test_read_committed_lag_is_to_the_last_stable_offset(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-lso"), partitions=1)
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        plain.send(topic, b"a", partition=0)
        plain.flush()
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": make_topic("open")})
    try:
        txn.init_transactions()
        txn.begin_transaction()
        for _ in range(5):
            txn.send(topic, b"open", partition=0)
        txn.flush()  # five records past the LSO, in a transaction left open
        consumer = Consumer(
            bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
        )
        try:
            consumer.assign([TopicPartition(topic, 0)])
            got = consumer.poll(timeout_ms=5000)
            m = consumer.metrics()
        finally:
            consumer.close()
    finally:
        txn.abort_transaction()
        txn.close()
    assert [r.value for r in got] == [b"a"]
    assert m.value("records-lag", topic=topic, partition=0) == 0  # the LSO, not the high watermark


def test_prometheus_serves_the_same_counters(bootstrap, make_topic):
    topic = _topic(bootstrap, make_topic("metrics-prom"), partitions=1)
    with Producer({"bootstrap.servers": bootstrap, "client.id": "prom-p"}) as producer:
        for _ in range(42):
            producer.send(topic, b"p")
        producer.flush()
        server = serve_metrics(0, producer)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        finally:
            server.shutdown()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("kafka_producer_producer_metrics_record_send_total", (("client_id", "prom-p"),))] == 42
    key = (
        "kafka_producer_producer_topic_metrics_record_send_total",
        (("client_id", "prom-p"), ("topic", topic)),
    )
    assert samples[key] == 42
    assert samples[("kafka_producer_producer_metrics_buffer_available_bytes", (("client_id", "prom-p"),))] > 0
