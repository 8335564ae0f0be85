"""Fault points of the Spark sink, for tests and the quickstart's crash demo. Off unless the
environment variable ``ONCEFLOW_SPARK_FAULT`` names one when the driver starts (Spark's Python
workers inherit the driver's environment).

- ``kill-driver-after-commit:N``: in the driver's ``commit`` of batch N, after every task's Kafka
  transaction committed and before Spark writes ``commits/N``, kill -9 the driver's whole process
  group (the Python driver and its JVM). This is the one crash the exactly-once sink's marker exists
  for: on restart Spark replays batch N, whose output is already in Kafka. Meant for a driver
  running in its own session (``start_new_session=True``): the group killed is the session's.

The batch-atomic sink (``guarantee=exactly-once-atomic``) has three more, for the crashes its
intent exists for:

- ``kill-driver-after-intent:N``: kill the driver once batch N's intent is durable, before any of its
  transactions is completed;
- ``kill-driver-after-completions:N:K``: kill it once K of batch N's transactions are completed;
- ``fail-task-after-prepare:N``: the first attempt of task 0 of batch N raises after its transaction
  is prepared (Spark retries the task; the retry's ``init_transactions`` aborts what it prepared);
- ``pause-driver-before-intent:N``: the driver's commit of batch N (every task prepared) creates the
  file ``paused`` in the directory ``ONCEFLOW_SPARK_FAULT_DIR`` names, then waits until a file ``go``
  appears there (at most :data:`PAUSE_LIMIT_S`) before taking the batch's intent: a test runs a second
  driver on the checkpoint meanwhile.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

FAULT_ENV = "ONCEFLOW_SPARK_FAULT"
KILL_DRIVER_AFTER_COMMIT = "kill-driver-after-commit"

KILL_DRIVER_AFTER_INTENT = "kill-driver-after-intent"
KILL_DRIVER_AFTER_COMPLETIONS = "kill-driver-after-completions"
FAIL_TASK_AFTER_PREPARE = "fail-task-after-prepare"
PAUSE_DRIVER_BEFORE_INTENT = "pause-driver-before-intent"
FAULT_DIR_ENV = "ONCEFLOW_SPARK_FAULT_DIR"
PAUSE_LIMIT_S = 300.0

__all__ = [
    "FAIL_TASK_AFTER_PREPARE",
    "FAULT_DIR_ENV",
    "FAULT_ENV",
    "KILL_DRIVER_AFTER_COMMIT",
    "KILL_DRIVER_AFTER_COMPLETIONS",
    "KILL_DRIVER_AFTER_INTENT",
    "PAUSE_DRIVER_BEFORE_INTENT",
    "kill_driver_fault",
    "on_driver_commit",
    "on_driver_before_intent",
    "on_driver_completion",
    "on_driver_intent",
    "on_task_prepared",
]


def kill_driver_fault(batch_id: int) -> str:
    """The ``ONCEFLOW_SPARK_FAULT`` value that kills the driver after batch ``batch_id``'s Kafka commit."""
    return f"{KILL_DRIVER_AFTER_COMMIT}:{batch_id}"


def _armed(name: str, *values: int) -> bool:
    """Whether ``ONCEFLOW_SPARK_FAULT`` is ``name:<values...>``."""
    fault, _, args = os.environ.get(FAULT_ENV, "").partition(":")
    return fault == name and args.split(":") == [str(v) for v in values]


def on_driver_commit(batch_id: int) -> None:
    """Called at the end of the sink's driver-side commit of ``batch_id``."""
    if _armed(KILL_DRIVER_AFTER_COMMIT, batch_id):
        _kill_driver()


def on_driver_before_intent(batch_id: int) -> None:
    """Called when the driver's commit of ``batch_id`` begins, before its intent is taken."""
    if not _armed(PAUSE_DRIVER_BEFORE_INTENT, batch_id):
        return
    directory = Path(os.environ[FAULT_DIR_ENV])
    (directory / "paused").touch()
    log.warning("fault %s: waiting for %s", os.environ[FAULT_ENV], directory / "go")
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not (directory / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def on_driver_intent(batch_id: int) -> None:
    """Called once the intent of ``batch_id`` is durable, before its first completion."""
    if _armed(KILL_DRIVER_AFTER_INTENT, batch_id):
        _kill_driver()


def on_driver_completion(batch_id: int, completed: int) -> None:
    """Called after each completion of a transaction of ``batch_id`` (``completed`` so far)."""
    if _armed(KILL_DRIVER_AFTER_COMPLETIONS, batch_id, completed):
        _kill_driver()


def on_task_prepared(batch_id: int, partition_id: int, attempt: int) -> None:
    if _armed(FAIL_TASK_AFTER_PREPARE, batch_id) and partition_id == 0 and attempt == 0:
        raise RuntimeError(f"fault {FAIL_TASK_AFTER_PREPARE}:{batch_id}: the task fails after preparing")


def _kill_driver() -> None:
    spec = os.environ.get(FAULT_ENV, "")
    session = os.getsid(0)
    if session <= 1:
        log.error("fault %s ignored: the driver does not run in its own session", spec)
        return
    log.warning("fault %s: killing the driver's process group %d", spec, session)
    # Spark's Python workers may run in a process group of their own within the session: that group
    # and this process die too, or the worker would go on completing what the fault interrupts.
    own_group = os.getpgid(0)
    os.killpg(session, signal.SIGKILL)
    if own_group != session:
        os.killpg(own_group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
