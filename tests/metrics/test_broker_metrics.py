"""The broker's ``/metrics`` read back with ``prometheus_client``'s parser, against one in-process broker
(its own thread and loop) for the module: the counters move by exactly what the tests produce,
consume, commit and abort; requests and error codes are counted per API; consumer lag is what
``onceflow groups describe`` shows; a hanging transaction is counted until it is aborted."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer as ConfluentProducer
from rich.console import Console
from tests.broker.raw_client import RawClient
from tests.broker.test_client_smoke import ThreadedBroker
from tests.conftest import topic_name
from tests.helpers.broker import free_port
from tests.metrics.scrape import scrape
from tests.transactions import wire

from onceflow.cli.main import cli
from onceflow.client import Consumer, Producer
from onceflow.client.consumer import OffsetAndMetadata
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.simple import SimpleClient
from onceflow.protocol.errors import KafkaError
from onceflow.protocol.records import validate_produce_records

pytestmark = pytest.mark.timeout(180)

MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
FAILED_PRODUCE = "kafka_server_brokertopicmetrics_failedproducerequests_total"
TOTAL_PRODUCE = "kafka_server_brokertopicmetrics_totalproducerequests_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
ERRORS = "kafka_network_requestmetrics_errors_total"
LOG_SIZE = "kafka_log_log_size"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    port = free_port()
    with ThreadedBroker(
        tmp_path_factory.mktemp("metrics"), metrics_port=port, group_initial_rebalance_delay_ms=0
    ) as running:
        running.metrics_port = port
        yield running


def eventually(check, timeout_s: float = 20.0):
    """``check()``'s value once it is true (the coordinators finish some work after answering)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def log_size(reading, topic: str, partitions: int) -> float:
    return sum(reading.value(LOG_SIZE, topic=topic, partition=str(p)) for p in range(partitions))


def test_produce_and_consume_counts_are_exact(broker):
    topic = topic_name("flow")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
    before = scrape(broker.metrics_port)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(80):
        producer.produce(topic, b"x" * (i % 7 + 1), key=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    after = scrape(broker.metrics_port)

    assert after.value(MESSAGES_IN, topic=topic) == 80
    assert after.value(MESSAGES_IN) - before.value(MESSAGES_IN) == 80
    written = log_size(after, topic, 2)
    assert written > 0 and after.value(BYTES_IN, topic=topic) == written  # every byte in is in the log
    assert after.value(BYTES_IN) - before.value(BYTES_IN) == written
    assert after.value(TOTAL_PRODUCE, topic=topic) >= 2 and after.value(FAILED_PRODUCE, topic=topic) == 0
    assert sum(s.value for s in after.samples(REQUESTS) if s.labels["request"] == "Produce") >= 1

    with SimpleClient(broker.bootstrap) as client:
        assert len(list(client.consume(topic, max_messages=80, timeout_s=10))) == 80
    consumed = scrape(broker.metrics_port)
    assert consumed.value(BYTES_OUT, topic=topic) == written  # each batch fetched once
    assert consumed.value(BYTES_OUT) - after.value(BYTES_OUT) == written
    assert consumed.value("kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) >= 2


def test_requests_and_error_codes_per_api(broker):
    topic = topic_name("small-records")
    with SimpleClient(broker.bootstrap) as client:
        # A one-replica partition caps min.insync.replicas at 1 (Kafka 4's effective min ISR), so the
        # broker-side Produce error here is a batch over the topic's max.message.bytes.
        client.create_topic(topic, configs={"max.message.bytes": "200"})
        client.metadata([topic])  # connected and warm: what follows is the only traffic
        before = scrape(broker.metrics_port)
        with pytest.raises(KafkaError):
            client.describe_topic(topic_name("nowhere"))  # one Metadata: UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaError):
            client.produce(topic, [(None, "v" * 1000)], partition=0)  # MESSAGE_TOO_LARGE
    after = scrape(broker.metrics_port)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta(ERRORS, request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta(ERRORS, request="Produce", error="MESSAGE_TOO_LARGE") == 1
    assert delta(ERRORS, request="Produce", error="NONE") == 0
    metadata = sum(s.value for s in after.samples(REQUESTS) if s.labels["request"] == "Metadata")
    metadata -= sum(s.value for s in before.samples(REQUESTS) if s.labels["request"] == "Metadata")
    assert metadata >= 1
    # A request for the topic, but not a "failed" one: Kafka's ReplicaManager counts a record over
    # max.message.bytes (as an unknown topic) among the client's errors, not the broker's failures.
    assert delta(FAILED_PRODUCE, topic=topic) == 0 and delta(TOTAL_PRODUCE, topic=topic) == 1
    assert delta(MESSAGES_IN, topic=topic) == 0
    # Each request's time is in its histograms, in Kafka's names.
    for name in ("totaltimems", "requestqueuetimems", "localtimems", "responsesendtimems"):
        assert after.value(f"kafka_network_requestmetrics_{name}_count", request="Produce") >= 1
        assert after.has(f"kafka_network_requestmetrics_{name}_bucket", request="Produce", le="+Inf")


def _lag_rows(bootstrap: str, group: str) -> dict[tuple[str, int], str]:
    """The lag column of ``onceflow groups describe GROUP``, by (topic, partition)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("onceflow.cli.groups.out", Console(width=250, highlight=False, soft_wrap=True))
        result = CliRunner().invoke(cli, ["groups", "describe", group, "--bootstrap-server", bootstrap])
    assert result.exit_code == 0, result.output
    rows = [
        [c.strip() for c in line.strip("│").split("│")]
        for line in result.output.splitlines()
        if line.startswith("│")
    ]
    return {(r[0], int(r[1])): r[4] for r in rows}


def test_offset_commits_and_lag_match_groups_describe(broker):
    topic = topic_name("lag")
    group = topic_name("g")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=3)
        for p, n in enumerate((5, 3, 0)):
            if n:
                client.produce(topic, [(None, f"v{i}") for i in range(n)], partition=p)
    before = scrape(broker.metrics_port)
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    with contextlib.closing(Consumer(config=config)) as consumer:
        consumer.assign([TP(topic, 0), TP(topic, 1)])
        consumer.commit({TP(topic, 0): OffsetAndMetadata(2), TP(topic, 1): OffsetAndMetadata(3)})
    after = scrape(broker.metrics_port)

    commits = "kafka_server_group_coordinator_metrics_offset_commit_count"
    assert after.value(commits) - before.value(commits) == 2
    lag = {
        (s.labels["topic"], int(s.labels["partition"])): s.value
        for s in after.samples("kafka_consumergroup_lag")
        if s.labels["consumergroup"] == group
    }
    assert lag == {(topic, 0): 3, (topic, 1): 0}
    described = _lag_rows(broker.bootstrap, group)
    assert {tp: int(v) for tp, v in described.items() if v != "-"} == lag
    assert after.value("kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 3
    assert (
        after.value("kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="1")
        == 3
    )
    assert after.value("kafka_consumergroup_members", consumergroup=group) == 0
    assert after.value("kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1


def test_a_group_rebalance_is_counted_and_its_state_reported(broker):
    from confluent_kafka import Consumer as ConfluentConsumer

    topic = topic_name("rebalance")
    group = topic_name("rg")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
    rebalances = "kafka_server_group_coordinator_metrics_group_completed_rebalance_count"
    stable = "kafka_coordinator_group_groupmetadatamanager_numgroupsstable"
    before = scrape(broker.metrics_port)
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 10000}
    consumers = [ConfluentConsumer(config)]
    try:
        consumers[0].subscribe([topic])

        def members(n: int):
            for c in consumers:
                c.poll(0.1)
            reading = scrape(broker.metrics_port)
            joined = reading.value("kafka_consumergroup_members", consumergroup=group) == n
            assigned = sum(len(c.assignment()) for c in consumers) == 2
            return reading if joined and assigned and reading.value(stable) > before.value(stable) else None

        first = eventually(lambda: members(1))
        assert first is not None
        assert first.value(rebalances) - before.value(rebalances) == 1  # generation 1
        consumers.append(ConfluentConsumer(config))
        consumers[1].subscribe([topic])
        second = eventually(lambda: members(2))
        assert second is not None
        assert second.value(rebalances) - first.value(rebalances) >= 1  # a new generation with both
    finally:
        for c in consumers:
            c.close()


def test_transactions_committed_and_aborted(broker):
    topic = topic_name("txn")
    tid = topic_name("tid")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic)
    before = scrape(broker.metrics_port)
    with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid}) as producer:
        producer.init_transactions()
        for values, commit in (((b"a", b"b", b"c"), True), ((b"d", b"e"), True), ((b"f",), False)):
            producer.begin_transaction()
            for v in values:
                producer.send(topic, v, partition=0)
            producer.flush()
            (producer.commit_transaction if commit else producer.abort_transaction)()

    commits = "kafka_coordinator_transaction_transactionstatemanager_commits_total"
    aborts = "kafka_coordinator_transaction_transactionstatemanager_aborts_total"

    def settled():
        reading = scrape(broker.metrics_port)
        done = reading.value(aborts) - before.value(aborts) >= 1
        return reading if done and reading.value(commits) - before.value(commits) >= 2 else None

    after = eventually(settled)
    assert after is not None
    assert after.value(commits) - before.value(commits) == 2
    assert after.value(aborts) - before.value(aborts) == 1
    commit_time = "kafka_coordinator_transaction_transactionstatemanager_committimems_count"
    assert after.value(commit_time) - before.value(commit_time) == 2
    assert after.value(MESSAGES_IN, topic=topic) == 6  # aborted records are appended too; markers are not
    states = "kafka_coordinator_transaction_transactionstatemanager_numtransactions"
    assert after.value(states, state="CompleteAbort") >= 1
    assert after.value("kafka_cluster_partition_laststableoffsetlag", topic=topic, partition="0") == 0


async def _append(partition, batch: bytes):
    return partition.append(validate_produce_records(bytearray(batch)))


async def _request(port: int, req, version: int):
    client = await RawClient.connect(port)
    try:
        return await client.request(req, version)
    finally:
        await client.close()


def test_a_hanging_transaction_is_counted_until_aborted(broker):
    topic = topic_name("stuck")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic)
    hanging = "kafka_coordinator_transaction_transactionstatemanager_hangingtransactions"
    assert scrape(broker.metrics_port).value(hanging) == 0
    # Data in the log that no coordinator knows of (as after a lost coordinator state), appended on
    # the broker's loop past the Produce path, where the coordinator would refuse it.
    batch = wire.txn_batch([b"stuck"], 888_000, 3, 0)
    partition = broker.broker.topics.get_partition(topic, 0)
    asyncio.run_coroutine_threadsafe(_append(partition, batch), broker._loop).result(10)
    reading = scrape(broker.metrics_port)
    assert reading.value(hanging) == 1
    assert reading.value("kafka_cluster_partition_laststableoffsetlag", topic=topic, partition="0") == 1

    result = CliRunner().invoke(
        cli,
        ["txn", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0"]
        + ["--bootstrap-server", broker.bootstrap],
    )
    assert result.exit_code == 0, result.output
    assert eventually(lambda: scrape(broker.metrics_port).value(hanging) == 0)


def test_process_and_broker_gauges(broker):
    reading = scrape(broker.metrics_port)
    assert reading.value("process_resident_memory_bytes") > 0
    assert reading.value("process_open_fds") > 0
    assert reading.has("process_cpu_seconds_total")
    assert reading.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert reading.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    partitions = reading.value("kafka_server_replicamanager_partitioncount")
    assert partitions == sum(s.value for s in reading.samples("kafka_topic_partitions")) > 0
    assert reading.value("kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 0
    assert reading.has("onceflow_broker_limit_events_total", kind="memory-pool-full")


def test_the_console_charts_read_these_names(broker):
    from onceflow.console.metrics_feed import parse

    reading = scrape(broker.metrics_port)
    counters, lag = parse(reading.text)
    assert counters["messages_in"] == reading.value(MESSAGES_IN) > 0
    assert counters["bytes_out"] == reading.value(BYTES_OUT)
    by_group: dict[str, float] = {}
    for s in reading.samples("kafka_consumergroup_lag"):
        by_group[s.labels["consumergroup"]] = by_group.get(s.labels["consumergroup"], 0.0) + s.value
    assert lag == by_group


def test_every_metric_is_documented(broker):
    documented = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    topic = topic_name("documented")
    with SimpleClient(broker.bootstrap) as client:  # a partition, requests and their times
        client.produce(topic, [(None, "v")])
        assert len(list(client.consume(topic, max_messages=1))) == 1
    reading = scrape(broker.metrics_port)
    assert reading.has("kafka_log_log_size", topic=topic, partition="0")
    missing = [
        name
        for name, family in reading.families.items()
        if f"`{name}_total" not in documented
        and f"`{name}`" not in documented
        and f"`{name}{{" not in documented
    ]
    assert missing == []
