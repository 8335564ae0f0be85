"""End-to-end PySpark pipeline throughput: onceflow source → trivial map → onceflow sink.

    python bench/pipeline.py [--quick] [--rows N] [--rounds R]

One onceflow broker, one local[2] SparkSession (its start is not timed). The input topic is filled
once; every round runs the pipeline with ``Trigger.AvailableNow`` over the whole topic into a fresh
output topic and checkpoint, and times it from query start to end. Contenders, interleaved per
round: the sink in ``at-least-once`` mode (idempotent producer, no transaction) and in
``exactly-once`` mode (one transaction per task per batch). Defaults: 1,000,000 rows, batches of
250,000 (``--batch-rows``), 8 MB fetches; ``--quick``: 200,000 rows, batches of 100,000.

Contenders run in ABBA order (flipped every round). Reported: input rows/s end to end (median over
rounds), median per-batch latency (Spark's triggerExecution), the exactly-once / at-least-once ratio
of the medians and the median of each round's own ratio (target ≥ 0.9), and the machine's 1-minute
load average at the end (other work on the 2 cores moves these numbers a lot). Progress goes to
stderr; the last stdout line is one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, emit, kill_all, median, progress  # noqa: E402

from onceflow.client import SimpleClient  # noqa: E402

GUARANTEES = ("at-least-once", "exactly-once")
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
    spark, bootstrap: str, topic: str, guarantee: str, workdir: Path, round_no: int, batch_rows: int
):
    from onceflow.spark.pipeline import PipelineConfig, run_pipeline

    config = PipelineConfig(
        app="__main__:trivial_map",
        input=topic,
        output=f"bench-out-{guarantee}-{round_no}",
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
    return rows, elapsed, latencies


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
    broker = BrokerProcess(workdir / "broker")
    results: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    latencies: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    per_round: dict[int, dict[str, float]] = {}
    unavailable: dict[str, str] = {}
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
            # ABBA: the order flips every round, so a machine getting busier favours neither.
            for guarantee in GUARANTEES if round_no % 2 == 0 else tuple(reversed(GUARANTEES)):
                if guarantee in unavailable:
                    continue
                try:
                    done, elapsed, batch_ms = run_once(
                        spark, broker.bootstrap, "bench-in", guarantee, workdir, round_no, batch_rows
                    )
                except Exception as exc:  # the exactly-once writer is not wired yet
                    if "NotImplementedError" not in repr(exc) and "transactional producer" not in str(exc):
                        raise
                    unavailable[guarantee] = "needs the client's transactional producer"
                    progress(f"{guarantee}: unavailable ({unavailable[guarantee]})")
                    continue
                if done != rows:
                    raise RuntimeError(f"{guarantee} round {round_no}: read {done} rows, expected {rows}")
                results[guarantee].append(rows / elapsed)
                per_round.setdefault(round_no, {})[guarantee] = rows / elapsed
                latencies[guarantee].extend(batch_ms)
                progress(f"round {round_no} {guarantee}: {rows / elapsed:,.0f} rows/s ({elapsed:.1f} s)")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        kill_all()
        tmp.cleanup()

    medians = {g: round(median(v)) for g, v in results.items() if v}
    ratios = {}
    if "exactly-once" in medians and "at-least-once" in medians:
        ratios["exactly-once/at-least-once"] = round(medians["exactly-once"] / medians["at-least-once"], 3)
    paired = [r["exactly-once"] / r["at-least-once"] for r in per_round.values() if len(r) == 2]
    emit(
        {
            "bench": "pipeline",
            "unit": "rows/s",
            "results": medians,
            "ratios": ratios,
            # The median of each round's own ratio: steadier when the machine's load drifts.
            "ratios_paired_by_round": (
                {"exactly-once/at-least-once": round(median(paired), 3)} if paired else {}
            ),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "batch_latency_ms": {g: round(median(v)) for g, v in latencies.items() if v},
            "unavailable": unavailable,
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
