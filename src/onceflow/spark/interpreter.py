"""Which Python Spark starts for its workers: the one running onceflow, unless the user chose one.

Spark runs every Python task (and, on the driver, the planning of a Python data source such as
``format("onceflow")``) in a Python worker process that it starts with ``PYSPARK_PYTHON``, or
``python3`` from ``PATH`` when that is unset. A user who installed onceflow in a virtual
environment and runs ``/path/to/venv/bin/onceflow`` without activating it (as pipx, a Makefile or
a cron job does) has a ``python3`` on ``PATH`` that cannot import onceflow, and the pipeline dies
with ``No module named 'onceflow'``. So the sessions onceflow makes point both variables at the
interpreter running onceflow.

A user's own choice wins: ``spark.pyspark.python`` / ``spark.pyspark.driver.python`` in the
session's configuration, or ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` in the environment.
Spark documents the properties as taking precedence over the variables, but a session started from
a Python process reads only the variables, so a property the user set is copied into its variable.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["worker_python_environment"]

# (Spark property, environment variable), each pair naming the same interpreter.
PYTHON_SETTINGS = (
    ("spark.pyspark.python", "PYSPARK_PYTHON"),
    ("spark.pyspark.driver.python", "PYSPARK_DRIVER_PYTHON"),
)


def worker_python_environment(
    conf: Mapping[str, str], environ: Mapping[str, str], executable: str
) -> dict[str, str]:
    """The environment variables to set before a SparkContext starts, given the session's ``conf``
    and the current ``environ``: the user's properties copied into their variables if they set any,
    nothing if they set only variables, otherwise both variables set to ``executable``."""
    from_conf = {variable: conf[prop] for prop, variable in PYTHON_SETTINGS if conf.get(prop)}
    if from_conf:
        return from_conf
    if any(environ.get(variable) for _, variable in PYTHON_SETTINGS):
        return {}
    return {variable: executable for _, variable in PYTHON_SETTINGS}
