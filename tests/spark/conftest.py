"""One SparkSession for every Spark test module (a session costs 5-14 s to start)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from onceflow.spark.pipeline import make_spark_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers import the tests' pipeline functions (tests.spark.*) by reference.
    path = os.environ.get("PYTHONPATH", "")
    if REPO_ROOT not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, path) if p)
    # local[2,3]: two cores, and a failed task is retried (up to 3 attempts) as on a cluster.
    session = make_spark_session(
        "onceflow-tests", master="local[2,3]", conf={"spark.sql.shuffle.partitions": "2"}
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
