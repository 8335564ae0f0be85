"""``onceflow pipeline run``: a PySpark streaming pipeline from one topic to another."""

from __future__ import annotations

import json
from pathlib import Path

import click

from onceflow.cli.common import DEFAULT_BOOTSTRAP, err, friendly_errors, out, parse_key_values


@click.group()
def pipeline():
    """Run PySpark pipelines between topics (needs the [spark] extra and Java 17)."""


@pipeline.command("run")
@click.option(
    "--app", required=True, metavar="MODULE:FUNCTION", help="Maps the input DataFrame to the output."
)
@click.option("--input", "input_topic", required=True, metavar="TOPIC", help="Topic to read.")
@click.option("--output", "output_topic", required=True, metavar="TOPIC", help="Topic to write.")
@click.option("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint dir (resume from it).")
@click.option("--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, metavar="HOST:PORT")
@click.option("--trigger-interval", default=None, metavar="INTERVAL", help='e.g. "5 seconds".')
@click.option("--available-now", is_flag=True, help="Process what is in the topic now, then stop.")
@click.option(
    "--guarantee",
    type=click.Choice(["exactly-once", "at-least-once"]),
    default="exactly-once",
    show_default=True,
)
@click.option("--output-mode", type=click.Choice(["append", "update", "complete"]), default="append")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--max-offsets-per-trigger", type=int, default=None)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration.")
@click.option(
    "--progress-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append each batch's progress report here as one JSON line (for tools watching the run).",
)
@click.option("--spark-log-level", default="WARN", show_default=True, help="Spark's own log level.")
def run(
    app,
    input_topic,
    output_topic,
    checkpoint,
    bootstrap,
    trigger_interval,
    available_now,
    guarantee,
    output_mode,
    starting_offsets,
    max_offsets_per_trigger,
    master,
    confs,
    progress_file,
    spark_log_level,
):
    """Run APP over the records of INPUT and write its output to OUTPUT."""
    try:
        from onceflow.spark.pipeline import PipelineConfig, make_spark_session, run_pipeline
    except ImportError as exc:
        raise click.ClickException(f"{exc}: install the Spark extra with pip install 'onceflow[spark]'")
    config = PipelineConfig(
        app=app,
        input=input_topic,
        output=output_topic,
        checkpoint=checkpoint,
        bootstrap=bootstrap,
        trigger_interval=trigger_interval,
        available_now=available_now,
        guarantee=guarantee,
        output_mode=output_mode,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )

    def report(progress: dict) -> None:
        err.print(f"batch {progress['batchId']}: {progress['numInputRows']} rows in")
        if progress_file is not None:
            with progress_file.open("a") as f:
                text = progress.json if hasattr(progress, "json") else json.dumps(progress)
                f.write(text.replace("\n", " ") + "\n")

    with friendly_errors(bootstrap):
        spark = make_spark_session(
            f"onceflow-pipeline-{input_topic}", master, parse_key_values(confs, "--conf")
        )
        spark.sparkContext.setLogLevel(spark_log_level)
        try:
            progress = run_pipeline(config, spark, on_progress=report)
        except KeyboardInterrupt:
            progress = []
        finally:
            spark.stop()
    rows = sum(p["numInputRows"] for p in progress)
    out.print(f"pipeline {app}: {len(progress)} batches, {rows} rows from {input_topic} to {output_topic}")
