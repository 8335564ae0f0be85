"""What the overload defences cost a well-behaved client: produce/consume throughput of this tree's
broker (memory pool, connection limits and quotas at their defaults) against a baseline source tree
(e.g. the commit before them), side by side.

    git worktree add --detach ../onceflow-base <commit>
    python bench/overload.py --baseline-src ../onceflow-base/src [--quick] [--records N] [--rounds R]

Each broker runs from its own source tree (PYTHONPATH per broker process); the workload is
bench/produce_consume.py's (a confluent-kafka producer, acks=all, linger.ms=5, batch.size=1 MiB,
1,000-byte records, then a consumer reading them back). Both brokers run in every round, and each
round swaps which goes first; medians are reported, with the ratio current/baseline per phase
(issue 20 asks >= 0.97) and each broker's CPU seconds per GB.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, emit, kill_all, median, progress  # noqa: E402
from produce_consume import PHASES, RECORD_BYTES, run_round  # noqa: E402

FULL = {"records": 300_000, "rounds": 5}
QUICK = {"records": 60_000, "rounds": 3}
CURRENT_SRC = Path(__file__).resolve().parent.parent / "src"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline-src", required=True, type=Path, help="the src/ of the tree to compare with"
    )
    parser.add_argument("--quick", action="store_true", help="smaller run, under 60 s")
    parser.add_argument("--records", type=int, help="records per round")
    parser.add_argument("--rounds", type=int, help="rounds (each runs both brokers once)")
    args = parser.parse_args(argv)
    if not (args.baseline_src / "onceflow").is_dir():
        parser.error(f"{args.baseline_src} has no onceflow package")
    preset = QUICK if args.quick else FULL
    records = args.records or preset["records"]
    rounds = args.rounds or preset["rounds"]
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-overload-")
    trees = {"current": CURRENT_SRC, "baseline": args.baseline_src.resolve()}
    brokers = {}
    try:
        for name, src in trees.items():
            broker = BrokerProcess(Path(tmp.name) / name, env={"PYTHONPATH": str(src)})
            broker.start()
            brokers[name] = broker
            progress(f"{name} broker from {src} on {broker.bootstrap} (pid {broker.pid})")
        samples = {
            name: {
                phase: {"rate": [], "broker_cpu_s_per_gb": [], "client_cpu_s_per_gb": []} for phase in PHASES
            }
            for name in brokers
        }
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: {records:,} records of {RECORD_BYTES} bytes")
            order = list(brokers) if round_no % 2 else list(reversed(brokers))  # who goes first alternates
            for name in order:
                run_round(name, brokers[name], records, payload, samples)
    finally:
        for broker in brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()
    results = {
        f"{name}.{phase}": round(median(samples[name][phase]["rate"])) for name in samples for phase in PHASES
    }
    cpu = {
        name: {phase: round(median(samples[name][phase]["broker_cpu_s_per_gb"]), 2) for phase in PHASES}
        for name in samples
    }
    ratios = {
        f"{phase} current/baseline": round(results[f"current.{phase}"] / results[f"baseline.{phase}"], 3)
        for phase in PHASES
    }
    emit(
        {
            "bench": "overload",
            "unit": "records/s",
            "results": results,
            "ratios": ratios,
            "cpu_s_per_gb": cpu,
            "params": {
                "records": records,
                "record_bytes": RECORD_BYTES,
                "rounds": rounds,
                "quick": args.quick,
                "baseline_src": str(args.baseline_src),
                "cpus": os.cpu_count(),
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
