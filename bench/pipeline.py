"""End-to-end PySpark pipeline throughput: onceflow source → trivial map → onceflow sink.

    python bench/pipeline.py [--quick] [--rows N] [--rounds R]

One onceflow broker (with ``transaction.two.phase.commit.enable=true``), one local[2] SparkSession
(its start is not timed). The input topic is filled once; every round runs the pipeline with
``Trigger.AvailableNow`` over the whole topic into a fresh output topic and checkpoint, and times it
from query start to end. Contenders, in an order rotated every round: the sink in ``at-least-once``
mode (idempotent producer, no transaction), ``exactly-once`` (one transaction per task per batch,
each committed by its task) and ``exactly-once-atomic`` (KIP-939: each task prepares, the driver
commits the batch's transactions together). Defaults: 1,000,000 rows, batches of 250,000
(``--batch-rows``), 8 MB fetches; ``--quick``: 200,000 rows, batches of 100,000.

Reported: input rows/s end to end (median over rounds), median per-batch latency (Spark's
triggerExecution), each exactly-once mode's ratio to at-least-once (of the medians, and the median of
each round's own ratio; target ≥ 0.9), and the machine's 1-minute load average at the end (other work
on the 2 cores moves these numbers a lot). Then one more batch-atomic run, not timed, with
read_committed readers on its output: for each batch, the time from the batch's end (every task had
prepared: the driver's commit began) to the moment a reader has all of it
(``atomic_visibility_after_batch_end_ms``, which includes reading the batch's rows), to the moment the
batch became visible and the driver had completed it (``atomic_after_batch_end_ms``), and from the last
task's prepare to the driver's commit beginning (``atomic_commit_start_after_tasks_end_ms``: Spark's
part). The other two modes have no such delay to measure: their rows become visible task by task
while the batch still runs. Progress goes to stderr; the last stdout
line is one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, emit, kill_all, median, progress  # noqa: E402

from onceflow.client import SimpleClient  # noqa: E402

GUARANTEES = ("at-least-once", "exactly-once", "exactly-once-atomic")
EXACTLY_ONCE_MODES = ("exactly-once", "exactly-once-atomic")
PARTITIONS = 2
FETCH_BYTES = 8 * 1024 * 1024  # per partition per fetch: fewer round trips per batch


def trivial_map(df):
    """The pipeline's function: keep the key, tag the value (no Python UDF: stays in the JVM)."""
    from pyspark.sql import functions as F

    return df.select("key", F.concat(F.lit(b"seen:"), F.col("value")).alias("value"))


def fill_input(bootstrap: str, topic: str, rows: int) -> None:
    carriers = [
        "UA",
        "AA",
        "B6",
        "DL",
        "EV",
        "MQ",
        "US",
        "WN",
        "VX",
        "FL",
        "AS",
        "9E",
        "F9",
        "HA",
        "YV",
        "OO",
    ]
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=PARTITIONS)
        chunk = 50_000
        for start in range(0, rows, chunk):
            client.produce(
                topic,
                (
                    (
                        carriers[i % len(carriers)].encode(),
                        b'{"flight":%d,"dep_delay":%d,"day":"2013-01-%02d"}' % (i, i % 90 - 10, i % 28 + 1),
                    )
                    for i in range(start, min(rows, start + chunk))
                ),
            )


def run_once(
    spark,
    bootstrap: str,
    topic: str,
    guarantee: str,
    workdir: Path,
    round_no: int | str,
    batch_rows: int,
    output: str | None = None,
):
    from onceflow.spark.pipeline import PipelineConfig, run_pipeline

    config = PipelineConfig(
        app="__main__:trivial_map",
        input=topic,
        output=output or f"bench-out-{guarantee}-{round_no}",
        checkpoint=str(workdir / f"ckpt-{guarantee}-{round_no}"),
        bootstrap=bootstrap,
        available_now=True,
        guarantee=guarantee,
        max_offsets_per_trigger=batch_rows,
        source_options={"kafka.max.partition.fetch.bytes": str(FETCH_BYTES)},
    )
    t0 = time.perf_counter()
    reports = run_pipeline(config, spark)
    elapsed = time.perf_counter() - t0
    rows = sum(r["numInputRows"] for r in reports)
    latencies = [r["durationMs"].get("triggerExecution", 0) for r in reports if r["numInputRows"] > 0]
    return rows, elapsed, latencies, reports


def visibility_after_batch_end(
    spark, bootstrap: str, topic: str, workdir: Path, batch_rows: int
) -> dict[str, list[int]]:
    """One batch-atomic run with two read_committed readers on the output, and per batch, in ms from
    the batch's end (the intent's ``batch_end_ms``: the driver's commit began, every task had prepared):

    - ``visible``: until a reader fetching little at a time (16 KB per partition) gets the batch's
      first rows: when the batch became visible (it becomes visible whole);
    - ``all_read``: until a reader fetching much at a time (8 MB) has read every row of the batch
      (``atomic_visibility_after_batch_end_ms`` since the first version of this benchmark: it adds the
      time to read the batch, which grows with its size);
    - ``completed``: until the driver had completed every transaction (the intent's ``completed_ms``);
    - ``commit_start_after_tasks_end``: from the last task's prepare to the driver's commit beginning
      (Spark: the driver's Python worker, the writer made anew).
    """
    from onceflow.client.consumer import Consumer
    from onceflow.spark.batch_intent import IntentLog

    output = "bench-out-visibility"
    with SimpleClient(bootstrap) as client:
        client.create_topic(output, partitions=PARTITIONS)
    # (rows seen so far, wall ms), after every poll that got rows, per reader
    seen_at: dict[str, list[tuple[int, int]]] = {"probe": [], "bulk": []}
    stop = threading.Event()

    def read(name: str, fetch_bytes: int) -> None:
        consumer = Consumer(
            config={
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-visibility-{name}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "max.partition.fetch.bytes": fetch_bytes,
            }
        )
        total = 0
        try:
            consumer.subscribe([output])
            while not stop.is_set():
                got = len(consumer.poll(timeout_ms=20))
                if got:
                    total += got
                    seen_at[name].append((total, time.time_ns() // 1_000_000))
        finally:
            consumer.close(autocommit=False)

    readers = [
        threading.Thread(target=read, args=("probe", 16 * 1024), daemon=True),
        threading.Thread(target=read, args=("bulk", FETCH_BYTES), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        _rows, _elapsed, _latencies, reports = run_once(
            spark, bootstrap, topic, "exactly-once-atomic", workdir, "visibility", batch_rows, output=output
        )
        time.sleep(2.0)
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
    intents = IntentLog(workdir / "ckpt-exactly-once-atomic-visibility")
    delays: dict[str, list[int]] = {
        "visible": [],
        "all_read": [],
        "completed": [],
        "commit_start_after_tasks_end": [],
    }
    through = 0
    for report in reports:
        if not report["numInputRows"]:
            continue
        before, through = through, through + report["numInputRows"]
        intent = intents.read(report["batchId"])
        first = next((ms for total, ms in seen_at["probe"] if total > before), None)
        whole = next((ms for total, ms in seen_at["bulk"] if total >= through), None)
        if intent is None or first is None or whole is None or intent.completed_ms is None:
            continue
        delays["visible"].append(first - intent.batch_end_ms)
        delays["all_read"].append(whole - intent.batch_end_ms)
        delays["completed"].append(intent.completed_ms - intent.batch_end_ms)
        if intent.tasks_ended_ms:
            delays["commit_start_after_tasks_end"].append(intent.batch_end_ms - intent.tasks_ended_ms)
    return delays


def _summary(values: list[int]) -> dict:
    return {
        "median": round(median(values)) if values else None,
        "max": max(values) if values else None,
        "batches": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, under a minute")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--batch-rows", type=int, default=None, help="maxOffsetsPerTrigger")
    args = parser.parse_args()
    rows = args.rows or (200_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    batch_rows = args.batch_rows or max(10_000, min(250_000, rows // 2))

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-pipeline-")
    workdir = Path(tmp.name)
    broker = BrokerProcess(
        workdir / "broker", extra_args=["--config", "transaction.two.phase.commit.enable=true"]
    )
    results: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    latencies: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    per_round: dict[int, dict[str, float]] = {}
    visibility: dict[str, list[int]] = {}
    spark = None
    try:
        broker.start()
        progress(f"onceflow broker on {broker.bootstrap}; filling the input with {rows} rows")
        fill_input(broker.bootstrap, "bench-in", rows)
        from onceflow.spark.pipeline import make_spark_session

        spark = make_spark_session("onceflow-bench", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        # Warm-up: the first query of a session pays for JIT and Python worker start-up.
        run_once(spark, broker.bootstrap, "bench-in", "at-least-once", workdir, -1, batch_rows)
        for round_no in range(rounds):
            # The order rotates every round, so a machine getting busier favours no contender.
            shift = round_no % len(GUARANTEES)
            for guarantee in GUARANTEES[shift:] + GUARANTEES[:shift]:
                done, elapsed, batch_ms, _ = run_once(
                    spark, broker.bootstrap, "bench-in", guarantee, workdir, round_no, batch_rows
                )
                if done != rows:
                    raise RuntimeError(f"{guarantee} round {round_no}: read {done} rows, expected {rows}")
                results[guarantee].append(rows / elapsed)
                per_round.setdefault(round_no, {})[guarantee] = rows / elapsed
                latencies[guarantee].extend(batch_ms)
                progress(f"round {round_no} {guarantee}: {rows / elapsed:,.0f} rows/s ({elapsed:.1f} s)")
        visibility = visibility_after_batch_end(spark, broker.bootstrap, "bench-in", workdir, batch_rows)
        progress(f"batch-atomic, ms after each batch's end: {visibility}")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        kill_all()
        tmp.cleanup()

    medians = {g: round(median(v)) for g, v in results.items() if v}
    ratios = {
        f"{g}/at-least-once": round(medians[g] / medians["at-least-once"], 3)
        for g in EXACTLY_ONCE_MODES
        if g in medians and "at-least-once" in medians
    }
    paired = {
        f"{g}/at-least-once": round(
            median(
                [r[g] / r["at-least-once"] for r in per_round.values() if g in r and "at-least-once" in r]
            ),
            3,
        )
        for g in EXACTLY_ONCE_MODES
        if any(g in r and "at-least-once" in r for r in per_round.values())
    }
    emit(
        {
            "bench": "pipeline",
            "unit": "rows/s",
            "results": medians,
            "ratios": ratios,
            # The median of each round's own ratio: steadier when the machine's load drifts.
            "ratios_paired_by_round": paired,
            # Batch-atomic, per batch, ms from the batch's end (the driver's commit began) until the
            # whole batch was read by a reader fetching 8 MB at a time (what earlier results report)...
            "atomic_visibility_after_batch_end_ms": _summary(visibility.get("all_read", [])),
            # ... and until it was visible (a reader fetching 16 KB got its first rows), until the
            # driver had completed it, and from the last task's prepare until the commit began.
            "atomic_after_batch_end_ms": {
                what: _summary(visibility.get(what, [])) for what in ("visible", "completed")
            },
            "atomic_commit_start_after_tasks_end_ms": _summary(
                visibility.get("commit_start_after_tasks_end", [])
            ),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "batch_latency_ms": {g: round(median(v)) for g, v in latencies.items() if v},
            "params": {
                "rows": rows,
                "rounds": rounds,
                "partitions": PARTITIONS,
                "max_offsets_per_trigger": batch_rows,
            },
        }
    )


if __name__ == "__main__":
    main()
