"""Fault points of the Spark sink, for tests and the quickstart's crash demo. Off unless the
environment variable ``ONCEFLOW_SPARK_FAULT`` names one when the driver starts (Spark's Python
workers inherit the driver's environment).

- ``kill-driver-after-commit:N``: in the driver's ``commit`` of batch N, after every task's Kafka
  transaction committed and before Spark writes ``commits/N``, kill -9 the driver's whole process
  group (the Python driver and its JVM). This is the one crash the exactly-once sink's marker exists
  for: on restart Spark replays batch N, whose output is already in Kafka. Meant for a driver
  running in its own session (``start_new_session=True``): the group killed is the session's.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

FAULT_ENV = "ONCEFLOW_SPARK_FAULT"
KILL_DRIVER_AFTER_COMMIT = "kill-driver-after-commit"

__all__ = ["FAULT_ENV", "KILL_DRIVER_AFTER_COMMIT", "kill_driver_fault", "on_driver_commit"]


def kill_driver_fault(batch_id: int) -> str:
    """The ``ONCEFLOW_SPARK_FAULT`` value that kills the driver after batch ``batch_id``'s Kafka commit."""
    return f"{KILL_DRIVER_AFTER_COMMIT}:{batch_id}"


def on_driver_commit(batch_id: int) -> None:
    """Called at the end of the sink's driver-side commit of ``batch_id``."""
    spec = os.environ.get(FAULT_ENV, "")
    name, _, batch = spec.partition(":")
    if name != KILL_DRIVER_AFTER_COMMIT or not batch.strip().isdigit() or int(batch) != batch_id:
        return
    session = os.getsid(0)
    if session <= 1:
        log.error("fault %s ignored: the driver does not run in its own session", spec)
        return
    log.warning("fault %s: killing the driver's process group %d", spec, session)
    os.killpg(session, signal.SIGKILL)
