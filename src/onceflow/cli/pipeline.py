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
@click.option(
    "--output",
    "output_topic",
    default=None,
    metavar="TOPIC",
    help="Topic to write (default: the topic each row names in its 'topic' column).",
)
@click.option("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint dir (resume from it).")
@click.option(
    "--bootstrap",
    "--bootstrap-server",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT",
)
@click.option("--trigger-interval", default=None, metavar="INTERVAL", help='e.g. "5 seconds".')
@click.option("--available-now", is_flag=True, help="Process what is in the topic now, then stop.")
@click.option(
    "--guarantee",
    type=click.Choice(["exactly-once", "exactly-once-atomic", "at-least-once"]),
    default="exactly-once",
    show_default=True,
)
@click.option("--output-mode", type=click.Choice(["append", "update", "complete"]), default="append")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--max-offsets-per-trigger", type=int, default=None)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration.")
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An option of the onceflow source (Spark's Kafka source names, e.g. failOnDataLoss=false).",
)
@click.option(
    "--sink-option",
    "sink_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An option of the sink (e.g. kafka.linger.ms=20, transactional.id.prefix=orders).",
)
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
    source_options,
    sink_options,
    progress_file,
    spark_log_level,
):
    """Run APP over the records of INPUT and write its output to OUTPUT (or to the topics its rows name).
    APP is imported as ``python -m`` would: from the current directory too."""
    try:
        from onceflow.spark.pipeline import (
            PipelineConfig,
            check_options,
            load_app,
            make_spark_session,
            run_pipeline,
        )
    except ImportError as exc:
        raise click.ClickException(f"{exc}: install the Spark extra with pip install 'onceflow[spark]'")
    try:
        load_app(app)  # a typo in --app fails now, not after Spark's start-up
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--app") from None
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
        source_options=parse_key_values(source_options, "--source-option"),
        sink_options=parse_key_values(sink_options, "--sink-option"),
    )
    try:
        check_options(config)  # a bad option fails now, by name, not in the query's first batch
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    reported: list[dict] = []

    def report(progress: dict) -> None:
        reported.append(progress)
        err.print(f"batch {progress['batchId']}: {progress['numInputRows']} rows in")
        if progress_file is not None:
            with progress_file.open("a") as f:
                text = progress.json if hasattr(progress, "json") else json.dumps(progress)
                f.write(text.replace("\n", " ") + "\n")

    with friendly_errors(bootstrap):
        _check_input_topic(bootstrap, input_topic)  # before a minute of Spark start-up, in one line
        spark = make_spark_session(
            f"onceflow-pipeline-{input_topic}", master, parse_key_values(confs, "--conf")
        )
        spark.sparkContext.setLogLevel(spark_log_level)
        try:
            progress = run_pipeline(config, spark, on_progress=report)
        except KeyboardInterrupt:
            progress = reported  # the batches finished before Ctrl-C
        except Exception as exc:
            if type(exc).__name__ not in _SPARK_FAILURES:
                raise
            # Spark has logged the whole report above; end with its cause in one line.
            raise click.ClickException(f"the pipeline failed: {spark_failure_cause(exc)}") from exc
        finally:
            spark.stop()
    rows = sum(p["numInputRows"] for p in progress)
    target = output_topic or "the topics its rows name"
    out.print(f"pipeline {app}: {len(progress)} batches, {rows} rows from {input_topic} to {target}")


# What PySpark raises when a query or job fails (their modules vary across PySpark versions).
_SPARK_FAILURES = frozenset({"StreamingQueryException", "Py4JJavaError", "PythonException"})


def _check_input_topic(bootstrap: str, topic: str) -> None:
    """The broker answers and has ``topic``; otherwise a one-line error (via ``friendly_errors``)."""
    from onceflow.client import SimpleClient

    with SimpleClient(bootstrap) as client:
        if topic not in client.list_topics(include_internal=True):
            raise click.ClickException(
                f"input topic {topic!r} does not exist on {bootstrap}; list topics with `onceflow topics list`"
            )


def spark_failure_cause(exc: BaseException) -> str:
    """The innermost error of a Spark failure report: the last ``SomeError: message`` line of the
    Python traceback Spark carries in its message (a source's or an app's own error), else its first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        head, sep, _ = line.partition(": ")
        if sep and head.replace(".", "").replace("_", "").isalnum() and head.endswith(("Error", "Exception")):
            return line
    return lines[0] if lines else type(exc).__name__
