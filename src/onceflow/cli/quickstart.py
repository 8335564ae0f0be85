"""``onceflow quickstart``: a self-checking tour on a throwaway broker.

Starts ``onceflow serve`` as a child process on a free loopback port, creates a topic, produces a
sample of events with the simple client, reads them back, checks count and content, and prints a
short report. The steps are a list of functions over a :class:`QuickstartRun`, so the later
Spark pipeline demo can replace or extend them without touching the broker plumbing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.table import Table

from onceflow.cli.common import err, friendly_errors, out
from onceflow.client.simple import SimpleClient

TOPIC = "quickstart-events"
PARTITIONS = 3
STARTUP_TIMEOUT_S = 30.0


@dataclass
class QuickstartRun:
    client: SimpleClient
    events: int
    report: list[tuple[str, str]] = field(default_factory=list)
    expected: dict[bytes, bytes] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def child_broker(data_dir: Path) -> Iterator[str]:
    """``onceflow serve`` in a child process; yields its bootstrap address and stops it after."""
    port = _free_port()
    log_path = data_dir / "broker.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "onceflow",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir / "data"),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for_port(proc, port, log_path)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_port(proc: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise click.ClickException(
                f"the broker exited with code {proc.returncode} while starting:\n{tail}"
            )
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise click.ClickException(
        f"the broker did not listen on port {port} within {STARTUP_TIMEOUT_S:.0f}s; see {log_path}"
    )


def step_create_topic(run: QuickstartRun) -> None:
    run.client.create_topic(TOPIC, partitions=PARTITIONS)
    run.report.append(("topic", f"{TOPIC} ({PARTITIONS} partitions)"))


def step_produce(run: QuickstartRun) -> None:
    run.expected = {
        f"user-{i % 97}:{i}".encode(): json.dumps(
            {"event": i, "kind": ("view", "click", "buy")[i % 3]}
        ).encode()
        for i in range(run.events)
    }
    started = time.perf_counter()
    results = run.client.produce(TOPIC, run.expected.items(), compression="lz4")
    elapsed = time.perf_counter() - started
    sent = sum(n for _p, _r, n in results)
    run.report.append(
        ("produced", f"{sent:,} events in {len(results)} batches, {sent / elapsed:,.0f} events/s")
    )


def step_consume_and_check(run: QuickstartRun) -> None:
    started = time.perf_counter()
    got = {r.key: r.value for r in run.client.consume(TOPIC, max_messages=run.events, timeout_s=10)}
    elapsed = time.perf_counter() - started
    run.report.append(("consumed", f"{len(got):,} events, {len(got) / max(elapsed, 1e-9):,.0f} events/s"))
    if got != run.expected:
        missing = len(run.expected.keys() - got.keys())
        wrong = sum(1 for k, v in got.items() if run.expected.get(k) != v)
        raise click.ClickException(f"check failed: {missing} event(s) missing, {wrong} changed")
    run.report.append(("check", "every event came back once, unchanged"))


STEPS: list[tuple[str, Callable[[QuickstartRun], None]]] = [
    ("creating a topic", step_create_topic),
    ("producing events", step_produce),
    ("consuming and checking", step_consume_and_check),
]


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the broker's data here (default: a temporary directory, removed after).",
)
@click.option("--small", is_flag=True, help="1,000 events instead of 10,000.")
def quickstart(data_dir, small):
    """Start a throwaway broker, produce and consume a sample, check it, and report."""
    events = 1_000 if small else 10_000
    temporary = data_dir is None
    base = Path(tempfile.mkdtemp(prefix="onceflow-quickstart-")) if temporary else data_dir
    base.mkdir(parents=True, exist_ok=True)
    try:
        with (
            err.status("starting a broker") as status,
            child_broker(base) as bootstrap,
            friendly_errors(bootstrap),
            SimpleClient(bootstrap) as client,
        ):
            run = QuickstartRun(client, events)
            where = "a temporary directory, removed after" if temporary else base / "data"
            run.report.append(("broker", f"onceflow on {bootstrap}, data in {where}"))
            for label, step in STEPS:
                status.update(label)
                step(run)
    finally:
        if temporary:
            shutil.rmtree(base, ignore_errors=True)
    table = Table(title="onceflow quickstart", show_header=False)
    table.add_column("step", style="bold")
    table.add_column("result")
    for name, result in run.report:
        table.add_row(name, result)
    out.print(table)
    out.print("[green]quickstart passed[/green]")
