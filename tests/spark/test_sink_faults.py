"""The exactly-once sink under real failures, compared with a failure-free run of the same input.

Every scenario reads the same input topic (2 partitions, 3 batches of 200 offsets) with
``tests.spark.apps:upper_values_same_partition``, so output partition P is written only by the task
reading input partition P and its content and order are deterministic. The failures:

- kill -9 of the driver (a child process) after batch 1's Kafka transactions committed and before
  Spark's commit log has batch 1 (the sink's ``kill-driver-after-commit`` fault point); the query is
  then resumed from its checkpoint, which replays batch 1. The at-least-once sink in the same
  scenario writes batch 1 twice, which shows the scenario does test something;
- the same kill with rows that name their topic (two output topics, no ``topic`` option), the driver
  started as the ``onceflow`` console script from the app module's own directory;
- a task that raises on its first attempt (``local[2,3]`` retries it);
- a broker killed (kill -9) and restarted while a task of batch 1 has an open transaction.

One broker for the module (restarted by the last test), the session's SparkSession.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.conftest import topic_name  # noqa: E402
from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.spark.apps import upper_values_same_partition  # noqa: E402
from tests.spark.conftest import REPO_ROOT  # noqa: E402

from onceflow.client import SimpleClient  # noqa: E402
from onceflow.spark.faults import FAULT_ENV, kill_driver_fault  # noqa: E402
from onceflow.spark.pipeline import PipelineConfig, run_pipeline, start_pipeline  # noqa: E402

pytestmark = pytest.mark.spark

RECORDS = 600
BATCH_OFFSETS = 200
APP = "tests.spark.apps:upper_values_same_partition"
OUTPUT_SCHEMA = "key BINARY, value STRING, partition INT"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("spark-faults-broker"))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def input_topic(broker):
    topic = topic_name("faults-in")
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
        client.produce(topic, [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(RECORDS)])
    return topic


def new_output(broker, prefix: str) -> str:
    topic = topic_name(prefix)
    with SimpleClient(broker.bootstrap) as client:
        client.create_topic(topic, partitions=2)
    return topic


def config_for(broker, input_topic, output, checkpoint: Path, guarantee="exactly-once", app=APP):
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


def by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes, bytes]]]:
    """What a read_committed consumer sees, per partition in offset order."""
    result: dict[int, list] = {0: [], 1: []}
    with SimpleClient(bootstrap) as client:
        for r in client.consume(topic, isolation_level="read_committed", timeout_s=1.5):
            result[r.partition].append((r.offset, r.key, r.value))
    return {p: [(k, v) for _o, k, v in sorted(rows)] for p, rows in result.items()}


@pytest.fixture(scope="module")
def reference(spark, broker, input_topic, tmp_path_factory):
    """The failure-free run's output."""
    output = new_output(broker, "faults-ref")
    config = config_for(broker, input_topic, output, tmp_path_factory.mktemp("ref") / "ckpt")
    progress = run_pipeline(config, spark)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [200, 200, 200]
    expected = by_partition(broker.bootstrap, output)
    assert sum(len(rows) for rows in expected.values()) == RECORDS
    return expected


def start_child_driver(
    config: PipelineConfig,
    fault: str,
    log_path: Path,
    *,
    launcher: list[str] | None = None,
    cwd: Path | None = None,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """``onceflow pipeline run`` (``launcher``: the command that runs the CLI) in its own session with a
    fault point set (``env``: more environment variables, e.g. the fault's directory)."""
    output = ["--output", config.output] if config.output is not None else []
    command = [
        *(launcher or [sys.executable, "-m", "onceflow"]),
        "pipeline",
        "run",
        "--app",
        config.app,
        "--input",
        config.input,
        *output,
        "--checkpoint",
        config.checkpoint,
        "--bootstrap",
        config.bootstrap,
        "--available-now",
        "--guarantee",
        config.guarantee,
        "--max-offsets-per-trigger",
        str(config.max_offsets_per_trigger),
        "--spark-log-level",
        "ERROR",
        *extra_args,
    ]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", **{FAULT_ENV: fault}, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd
        )


def wait_child(proc: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(900)  # two driver starts and two resumes: near the default 300 s on a busy machine
def test_driver_killed_between_kafka_commit_and_spark_commit_log(
    spark, broker, input_topic, reference, tmp_path
):
    """Both sinks, same crash; the two child drivers run side by side to save a driver start."""
    configs = {
        guarantee: config_for(
            broker,
            input_topic,
            new_output(broker, f"faults-kill-{guarantee}"),
            tmp_path / guarantee,
            guarantee,
        )
        for guarantee in ("exactly-once", "at-least-once")
    }
    logs = {g: tmp_path / f"driver-{g}.log" for g in configs}
    procs = {g: start_child_driver(c, kill_driver_fault(1), logs[g]) for g, c in configs.items()}
    codes = {g: wait_child(p) for g, p in procs.items()}
    for guarantee, config in configs.items():
        assert codes[guarantee] == -signal.SIGKILL, logs[guarantee].read_text()[-3000:]
        checkpoint = Path(config.checkpoint)
        assert (checkpoint / "offsets" / "1").exists()
        assert not (checkpoint / "commits" / "1").exists()  # Spark does not know batch 1 was written
        progress = run_pipeline(config, spark)  # resume: replays batch 1, then batch 2
        assert [p["batchId"] for p in progress if p["numInputRows"]] == [1, 2]

    exactly_once = by_partition(broker.bootstrap, configs["exactly-once"].output)
    assert exactly_once == reference
    # The baseline: batch 1 is in the output twice; apart from that, the same records.
    at_least_once = by_partition(broker.bootstrap, configs["at-least-once"].output)
    assert sum(len(rows) for rows in at_least_once.values()) > RECORDS
    assert {p: list(dict.fromkeys(rows)) for p, rows in at_least_once.items()} == reference


ROUTING_APP = """
from pyspark.sql import functions as F


def route(df):
    # Even offsets to <input>-even, odd ones to <input>-odd: the rows name their topic.
    parity = F.when(F.col("offset") % 2 == 0, F.lit("-even")).otherwise(F.lit("-odd"))
    value = F.upper(F.col("value").cast("string"))
    return df.select("key", value.alias("value"), F.concat("topic", parity).alias("topic"))
"""

CONSOLE_SCRIPT = "import sys\nfrom onceflow.cli.main import main\nsys.exit(main())\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rows_naming_two_topics_are_written_once_through_a_driver_kill(spark, broker, input_topic, tmp_path):
    """No topic option: each row names one of two output topics. The driver is the ``onceflow`` console
    script (its own directory first on sys.path, not the current one), run from the directory that
    holds the app module, and killed between batch 1's Kafka commit and Spark's commit log. After the
    resume every input record is in its topic exactly once."""
    app_dir, bin_dir = tmp_path / "app", tmp_path / "bin"
    app_dir.mkdir()
    bin_dir.mkdir()
    (app_dir / "routing_app.py").write_text(ROUTING_APP)
    (bin_dir / "onceflow").write_text(CONSOLE_SCRIPT)
    outputs = {suffix: f"{input_topic}-{suffix}" for suffix in ("even", "odd")}
    with SimpleClient(broker.bootstrap) as client:
        for topic in outputs.values():
            client.create_topic(topic, partitions=2)
    config = config_for(broker, input_topic, None, tmp_path / "ckpt", app="routing_app:route")
    log_path = tmp_path / "driver.log"
    proc = start_child_driver(
        config,
        kill_driver_fault(1),
        log_path,
        launcher=[sys.executable, str(bin_dir / "onceflow")],
        cwd=app_dir,
    )
    assert wait_child(proc, timeout=600) == -signal.SIGKILL, log_path.read_text()[-3000:]
    assert (tmp_path / "ckpt" / "offsets" / "1").exists()
    assert not (tmp_path / "ckpt" / "commits" / "1").exists()

    spec = importlib.util.spec_from_file_location("routing_app", app_dir / "routing_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config.app = module.route  # the resume runs here, with the same function
    progress = run_pipeline(config, spark)
    assert [p["batchId"] for p in progress if p["numInputRows"]] == [1, 2]  # batch 1 replayed

    with SimpleClient(broker.bootstrap) as client:
        expected = Counter(
            (outputs["even" if r.offset % 2 == 0 else "odd"], r.key, r.value.upper())
            for r in client.consume(input_topic, isolation_level="read_committed", timeout_s=1.5)
        )
        written = Counter(
            (topic, r.key, r.value)
            for topic in outputs.values()
            for r in client.consume(topic, isolation_level="read_committed", timeout_s=1.5)
        )
    assert sum(expected.values()) == RECORDS
    assert written == expected


def fail_first_attempt(df):
    """The app, with partition 0 of batch 1 failing on its first attempt after all its rows went
    on towards the sink."""
    from pyspark import TaskContext

    def maybe_fail(batches):
        yield from batches
        context = TaskContext.get()
        if (
            context.getLocalProperty("streaming.sql.batchId") == "1"
            and context.partitionId() == 0
            and context.attemptNumber() == 0
        ):
            raise RuntimeError("injected failure of the first attempt")

    return upper_values_same_partition(df).mapInArrow(maybe_fail, OUTPUT_SCHEMA)


def test_task_failing_once_is_retried_without_duplicates(spark, broker, input_topic, reference, tmp_path):
    output = new_output(broker, "faults-task")
    config = config_for(broker, input_topic, output, tmp_path / "ckpt", app=fail_first_attempt)
    progress = run_pipeline(config, spark)
    assert sum(p["numInputRows"] for p in progress) == RECORDS
    assert by_partition(broker.bootstrap, output) == reference


def pause_in_batch_1(signal_dir: str):
    """The app, with partition 0 of batch 1 pausing half way (its transaction open) until the test
    has restarted the broker."""
    from pyspark import TaskContext

    def maybe_pause(batches):
        context = TaskContext.get()
        pausing = (
            context.getLocalProperty("streaming.sql.batchId") == "1"
            and context.partitionId() == 0
            and context.attemptNumber() == 0
        )
        for batch in batches:
            if pausing and batch.num_rows > 1:
                yield batch.slice(0, batch.num_rows // 2)
                Path(signal_dir, "paused").touch()
                deadline = time.monotonic() + 120
                while not Path(signal_dir, "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                yield batch.slice(batch.num_rows // 2)
                pausing = False
            else:
                yield batch

    def app(df):
        return upper_values_same_partition(df).mapInArrow(maybe_pause, OUTPUT_SCHEMA)

    return app


def test_broker_restart_mid_batch(spark, broker, input_topic, reference, tmp_path):
    output = new_output(broker, "faults-broker")
    signals = tmp_path / "signals"
    signals.mkdir()
    config = config_for(broker, input_topic, output, tmp_path / "ckpt", app=pause_in_batch_1(str(signals)))
    query = start_pipeline(spark, config)
    try:
        deadline = time.monotonic() + 180
        while not (signals / "paused").exists():
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.1)
        broker.kill9()
        broker.restart()
        (signals / "go").touch()
        query.awaitTermination(240)
        assert query.exception() is None
    finally:
        if query.isActive:
            query.stop()
    assert sum(p["numInputRows"] for p in query.recentProgress) == RECORDS
    assert by_partition(broker.bootstrap, output) == reference
