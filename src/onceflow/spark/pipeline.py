"""The pipeline runner: input topic → the user's function → output topic, as a streaming query.

``run_pipeline(PipelineConfig(app="mymodule:transform", input="in", output="out", checkpoint=...))``
reads ``input`` with the onceflow source, calls ``transform(df)`` (a streaming DataFrame in the
source's schema, returning a DataFrame with a ``value`` column and optionally ``key``, ``topic``,
``partition``, ``headers``) and writes the result with the onceflow sink: to ``output``, or, when
``output`` is None, to the topic each row names in its ``topic`` column. The checkpoint directory
holds Spark's offsets and commit log: run the same command again to resume where it stopped.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from onceflow.spark.interpreter import worker_python_environment
from onceflow.spark.sink_options import EXACTLY_ONCE

log = logging.getLogger(__name__)

__all__ = [
    "PipelineConfig",
    "check_options",
    "load_app",
    "make_spark_session",
    "run_pipeline",
    "sink_options",
    "source_options",
    "start_pipeline",
]

# Spark's default of 200 shuffle partitions makes every aggregation batch start 200 tasks; on a
# one-machine pipeline a handful is faster. A user's --conf overrides it.
DEFAULT_SHUFFLE_PARTITIONS = "4"


@dataclass
class PipelineConfig:
    app: str | Callable  # "package.module:function", or the function itself
    input: str
    output: str | None  # None: each row names its topic in a ``topic`` column
    checkpoint: str
    bootstrap: str = "127.0.0.1:9092"
    trigger_interval: str | None = None  # e.g. "5 seconds"; None: as fast as possible
    available_now: bool = False  # process what is there now, then stop
    guarantee: str = EXACTLY_ONCE
    output_mode: str = "append"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    source_options: dict[str, str] = field(default_factory=dict)
    sink_options: dict[str, str] = field(default_factory=dict)
    query_name: str | None = None


def load_app(spec: str) -> Callable:
    """``"module:function"`` (or ``module.function``) to the function; ValueError names what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"--app {spec!r}: expected MODULE:FUNCTION, e.g. mypipeline:transform")
    _current_directory_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--app {spec!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?")
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"--app {spec!r}: {module_name!r} has no function {attr!r}")
    return function


def _current_directory_importable() -> None:
    """Put the current directory first on the import path, as ``python -m`` does (the ``onceflow``
    console script puts its own directory there instead), and on PYTHONPATH, which Spark's Python
    workers inherit from a session started afterwards: a pipeline module next to the user imports."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


def make_spark_session(
    app_name: str = "onceflow-pipeline", master: str = "local[2]", conf: dict[str, str] | None = None
):
    """A local SparkSession on loopback with the onceflow data source registered, whose Python workers
    run this interpreter unless ``conf`` or the environment name another (``spark.interpreter``)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.update(worker_python_environment(conf or {}, os.environ, sys.executable))
    from pyspark.sql import SparkSession

    from onceflow.spark import register

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", DEFAULT_SHUFFLE_PARTITIONS)
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def source_options(config: PipelineConfig) -> dict[str, str]:
    """The options the pipeline reads its input with."""
    options = {
        "kafka.bootstrap.servers": config.bootstrap,
        "subscribe": config.input,
        "startingOffsets": config.starting_offsets,
    }
    if config.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(config.max_offsets_per_trigger)
    return {**options, **config.source_options}


def sink_options(config: PipelineConfig) -> dict[str, str]:
    """The options the pipeline writes its output with."""
    options = {"kafka.bootstrap.servers": config.bootstrap, "guarantee": config.guarantee}
    if config.output is not None:
        options["topic"] = config.output
    return {**options, **config.sink_options}


def check_options(config: PipelineConfig) -> None:
    """Validate the source's and the sink's options before Spark starts (ValueError naming the bad
    one): PySpark runs a sink's checks only when its query runs its first batch."""
    from onceflow.spark.options import parse_source_options
    from onceflow.spark.sink_options import parse_sink_options

    parse_source_options(source_options(config), streaming=True)
    parse_sink_options(sink_options(config))


def start_pipeline(spark, config: PipelineConfig):
    """Start the streaming query and return it (``awaitTermination()`` / ``stop()`` are the caller's)."""
    transform = config.app if callable(config.app) else load_app(config.app)
    check_options(config)
    reader = spark.readStream.format("onceflow")
    for key, value in source_options(config).items():
        reader = reader.option(key, value)
    output = transform(reader.load())
    if "value" not in output.columns:
        raise ValueError(f"--app {config.app!r} returned columns {output.columns}; the sink needs 'value'")
    if config.output is None and "topic" not in output.columns:
        raise ValueError(
            f"--app {config.app!r} returned columns {output.columns}: with no output topic given, "
            "each row names its topic in a 'topic' column"
        )
    writer = output.writeStream.format("onceflow").outputMode(config.output_mode)
    for key, value in {**sink_options(config), "checkpointLocation": config.checkpoint}.items():
        writer = writer.option(key, value)
    if config.query_name:
        writer = writer.queryName(config.query_name)
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    elif config.trigger_interval:
        writer = writer.trigger(processingTime=config.trigger_interval)
    query = writer.start()
    log.info(
        "pipeline %s: %s -> %s (checkpoint %s)",
        config.app,
        config.input,
        config.output or "the topics its rows name",
        config.checkpoint,
    )
    return query


def run_pipeline(config: PipelineConfig, spark=None, *, on_progress: Callable[[dict], None] | None = None):
    """Run until the query ends (``available_now``) or is interrupted; returns the progress reports."""
    owned = spark is None
    spark = spark or make_spark_session()
    query = start_pipeline(spark, config)
    seen = 0
    try:
        while not query.awaitTermination(1):
            progress = query.recentProgress
            if on_progress is not None:
                for report in progress[seen:]:
                    on_progress(report)
            seen = max(seen, len(progress))
        progress = query.recentProgress
        if on_progress is not None:
            for report in progress[seen:]:
                on_progress(report)
        return progress
    finally:
        if query.isActive:
            query.stop()
        if owned:
            spark.stop()
