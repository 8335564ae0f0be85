"""What client metrics cost: onceflow's producer and consumer with metrics (this checkout) against
the same client before metrics existed (a git revision), side by side on one broker.

    python bench/client_metrics.py [--quick] [--records N] [--rounds R] [--batch-size B] [--baseline REV]

The workers are ``bench/client.py``'s onceflow workers (N x 1 KB records to one partition, idempotent,
acks=all; then read back), run in subprocesses whose ``PYTHONPATH`` is either this checkout's ``src``
or the baseline's, exported with ``git archive`` into a temp dir. Rounds interleave the two
(A, B, B, A, ...). Besides records per second (wall clock, at the mercy of whatever else runs on the
machine), each run reports records per CPU second of the worker process (user + system, from
``RUSAGE_CHILDREN``; it includes the interpreter's start, the same for both): the cost the metrics
add shows there even on a busy machine. The baseline defaults to the parent of the commit that added
``src/onceflow/client/metrics.py``. ``--batch-size`` defaults to Kafka's 16 KiB: the more batches per
record, the more the per-batch metrics weigh. Target: with/without >= 0.97.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, BrokerProcess, emit, kill_all, median, progress  # noqa: E402

FULL = {"records": 300_000, "rounds": 4}
QUICK = {"records": 60_000, "rounds": 2}
CLIENT_BENCH = str(Path(__file__).resolve().parent / "client.py")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def default_baseline() -> str:
    added = _git("log", "--diff-filter=A", "--format=%H", "--", "src/onceflow/client/metrics.py")
    if not added:
        raise SystemExit("src/onceflow/client/metrics.py is not committed yet: give --baseline REV")
    return added.splitlines()[-1] + "^"


def export_src(revision: str, into: Path) -> Path:
    """``src/`` of ``revision`` unpacked under ``into``; returns the path to put on PYTHONPATH."""
    archive = into / "src.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(REPO_ROOT), "archive", revision, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_worker(src: Path, phase: str, bootstrap: str, topic: str, args) -> tuple[float, float]:
    """(records per second, records per CPU second) of one worker run."""
    cmd = [
        sys.executable, CLIENT_BENCH, "--worker",
        "--phase", phase, "--contender", "onceflow",
        "--bootstrap", bootstrap, "--topic", topic,
        "--records", str(args.records), "--batch-size", str(args.batch_size),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(src))
    cpu_before = _children_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    cpu = _children_cpu() - cpu_before
    if out.returncode != 0:
        raise RuntimeError(f"{phase} with {src} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["records"] / result["seconds"], result["records"] / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--baseline", help="git revision without client metrics")
    parser.add_argument("--phases", default="produce,consume")
    args = parser.parse_args()
    defaults = QUICK if args.quick else FULL
    args.records = args.records or defaults["records"]
    rounds = args.rounds or defaults["rounds"]
    baseline = args.baseline or default_baseline()
    phases = [p for p in args.phases.split(",") if p]

    sys.path.insert(0, str(Path(CLIENT_BENCH).parent))
    import client as client_bench  # bench/client.py: its topic setup

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-metrics-")
    sources = {
        "metrics": REPO_ROOT / "src",
        "baseline": export_src(baseline, Path(tmp.name)),
    }
    progress(f"baseline {baseline} ({_git('rev-parse', '--short', baseline)})")
    broker = BrokerProcess(Path(tmp.name) / "onceflow")
    broker.start()
    progress(f"onceflow on {broker.bootstrap} (pid {broker.pid})")
    rates: dict[str, dict[str, list[float]]] = {p: {name: [] for name in sources} for p in phases}
    per_cpu: dict[str, dict[str, list[float]]] = {p: {name: [] for name in sources} for p in phases}
    try:
        for round_no in range(rounds):
            order = list(sources) if round_no % 2 == 0 else list(reversed(sources))
            for phase in phases:
                setup, _workers = client_bench.PHASES[phase]
                for name in order:
                    topic = setup(broker.bootstrap, args.records, round_no, name)
                    rate, cpu_rate = run_worker(sources[name], phase, broker.bootstrap, topic, args)
                    rates[phase][name].append(rate)
                    per_cpu[phase][name].append(cpu_rate)
                    progress(
                        f"round {round_no + 1} {phase:8s} {name:9s} {rate:>10,.0f} rec/s "
                        f"{cpu_rate:>10,.0f} rec/cpu-s"
                    )
    finally:
        broker.stop()
        kill_all()
        tmp.cleanup()
    results = {f"{p}_{name}": round(median(rs)) for p, by in rates.items() for name, rs in by.items()}
    results.update(
        {f"{p}_{name}_per_cpu_s": round(median(rs)) for p, by in per_cpu.items() for name, rs in by.items()}
    )
    ratios = {
        f"{p}_metrics/baseline": round(median(by["metrics"]) / median(by["baseline"]), 3)
        for p, by in rates.items()
    }
    ratios.update(
        {
            f"{p}_metrics/baseline_per_cpu_s": round(median(by["metrics"]) / median(by["baseline"]), 3)
            for p, by in per_cpu.items()
        }
    )
    emit(
        {
            "bench": "client_metrics",
            "unit": "records/s",
            "results": results,
            "ratios": ratios,
            "params": {
                "records": args.records,
                "record_bytes": client_bench.RECORD_BYTES,
                "batch_size": args.batch_size,
                "rounds": rounds,
                "baseline": _git("rev-parse", "--short", baseline),
            },
        }
    )


if __name__ == "__main__":
    main()
