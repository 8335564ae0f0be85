"""Spark's Python workers run the interpreter that runs onceflow, whatever ``python3`` is on PATH.

``onceflow pipeline run`` by absolute path, in a shell whose ``python3`` is a bare virtual
environment that cannot import onceflow (``tests/helpers/foreign_python.py``): before the fix
Spark started its workers with that ``python3`` and the driver died with ``No module named
'onceflow'`` (``PYTHON_DATA_SOURCE_ERROR``). The quickstart runs the same way in
``tests/cli/test_cli_roundtrip.py``. One small topic, one Spark driver process: the cost is the
driver's start-up. Which setting wins when the user chose an interpreter is tested on
``worker_python_environment`` alone.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.helpers.foreign_python import foreign_python_env, onceflow_command
from tests.spark.conftest import REPO_ROOT

from onceflow.client import SimpleClient
from onceflow.spark.interpreter import worker_python_environment

RECORDS = 40
ONCEFLOWS_PYTHON = "/opt/app/venv/bin/python"
BOTH_VARIABLES = {"PYSPARK_PYTHON": ONCEFLOWS_PYTHON, "PYSPARK_DRIVER_PYTHON": ONCEFLOWS_PYTHON}


def test_workers_run_onceflows_interpreter_when_nobody_chose_one():
    assert worker_python_environment({}, {"PATH": "/usr/bin"}, ONCEFLOWS_PYTHON) == BOTH_VARIABLES
    # Empty values are unset values, as Spark's launcher treats them.
    empty = {"PYSPARK_PYTHON": "", "PYSPARK_DRIVER_PYTHON": ""}
    assert worker_python_environment({"spark.pyspark.python": ""}, empty, ONCEFLOWS_PYTHON) == BOTH_VARIABLES


@pytest.mark.parametrize("variable", ["PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"])
def test_a_variable_the_user_set_is_left_as_it_is(variable):
    assert worker_python_environment({}, {variable: "/usr/bin/python3.12"}, ONCEFLOWS_PYTHON) == {}


def test_properties_the_user_set_reach_sparks_variables_and_win_over_them():
    environ = {"PYSPARK_PYTHON": "/usr/bin/python3"}
    conf = {"spark.pyspark.python": "/srv/py/bin/python", "spark.master": "local[2]"}
    assert worker_python_environment(conf, environ, ONCEFLOWS_PYTHON) == {
        "PYSPARK_PYTHON": "/srv/py/bin/python"
    }
    driver_only = {"spark.pyspark.driver.python": "/srv/py/bin/python"}
    assert worker_python_environment(driver_only, {}, ONCEFLOWS_PYTHON) == {
        "PYSPARK_DRIVER_PYTHON": "/srv/py/bin/python"
    }


@pytest.mark.spark
@pytest.mark.timeout(360)  # a driver's start-up, up to 300 s on a busy machine
def test_pipeline_run_by_absolute_path_with_a_foreign_python3_on_path(tmp_path):
    pytest.importorskip("pyspark")
    # The workers import the app (tests.spark.apps) from the repository, as a user's from PYTHONPATH.
    env = foreign_python_env(tmp_path, extra={"PYTHONPATH": _with_repo_root(), "SPARK_LOCAL_IP": "127.0.0.1"})
    with BrokerProcess(tmp_path / "broker") as broker:
        source, sink = topic_name("wp-in"), topic_name("wp-out")
        with SimpleClient(broker.bootstrap) as client:
            client.create_topic(source, partitions=2)
            client.create_topic(sink, partitions=2)
            client.produce(source, [(b"k", f"v{i}".encode()) for i in range(RECORDS)])
        result = subprocess.run(
            [
                *onceflow_command(),
                "pipeline",
                "run",
                "--app",
                "tests.spark.apps:upper_values",
                "--input",
                source,
                "--output",
                sink,
                "--checkpoint",
                str(tmp_path / "ckpt"),
                "--bootstrap",
                broker.bootstrap,
                "--available-now",
                "--master",
                "local[1]",
                "--spark-log-level",
                "ERROR",
            ],  # fmt: skip
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-5000:]
        with SimpleClient(broker.bootstrap) as client:
            written = list(client.consume(sink, isolation_level="read_committed", timeout_s=1.5))
    assert sorted(r.value for r in written) == sorted(f"V{i}".encode() for i in range(RECORDS))


def _with_repo_root() -> str:
    path = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (REPO_ROOT, path) if p)
