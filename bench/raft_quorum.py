"""The controller quorum on loopback: three ``onceflow.raft.demo`` processes (the replicated counter),
per round:

- commit latency: from the leader taking a record (the batch's append time) to its listener seeing
  it committed, with Kafka's ``controller.quorum.append.linger.ms`` (25 ms) and with 0;
- failover after ``kill -9`` of the leader: from the kill to the first commit of the new leader
  (the bound the issue sets: ``controller.quorum.election.timeout.ms`` + 2 s);
- graceful handover: SIGTERM to the new leader (it resigns with EndQuorumEpoch) to the first commit
  of its successor.

Rounds alternate the two linger settings; medians over the rounds. ``--quick`` runs 3 rounds with
shorter measurement windows. Last stdout line: one JSON object (bench/BENCH rules).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, median, progress
from tests.raft.processes import Quorum

ELECTION_TIMEOUT_MS = 1000  # Kafka's default, which the runs use


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def first_commit_of(quorum: Quorum, leader: int, among: list[int], after_ms: int) -> int | None:
    times = [
        e["ts"]
        for n in among
        for e in quorum.nodes[n].events()
        if e["event"] == "commit"
        and e["ts"] >= after_ms
        and any(v.startswith(f"{leader}:") for v in e["values"])
    ]
    return min(times) if times else None


def one_round(root: Path, linger_ms: int, window_s: float) -> dict[str, float]:
    quorum = Quorum(
        root, args=["--append-every-ms", "20", "--config", f"controller.quorum.append.linger.ms={linger_ms}"]
    )
    try:
        quorum.start_all()
        ids = list(quorum.nodes)
        leader = quorum.wait_for("a leader", lambda: quorum.agreed_leader(ids), 120)
        start = now_ms()
        time.sleep(window_s)
        latencies = [
            e["ts"] - e["appended_ms"]
            for e in quorum.nodes[leader].events()
            if e["event"] == "commit" and e["values"] and e["ts"] >= start
        ]
        killed_at = now_ms()
        quorum.nodes[leader].kill()
        survivors = [i for i in ids if i != leader]
        second = quorum.wait_for(
            "a new leader",
            lambda: (lead := quorum.agreed_leader(survivors)) not in (None, leader) and lead,
            120,
        )
        failover_at = quorum.wait_for(
            "its first commit", lambda: first_commit_of(quorum, second, survivors, killed_at)
        )
        quorum.nodes[leader].start()
        time.sleep(1.0)
        everyone_else = [i for i in ids if i != second]
        quorum.wait_for("all three following", lambda: quorum.agreed_leader(ids) == second, 120)
        terminated_at = now_ms()
        quorum.nodes[second].terminate()
        third = quorum.wait_for(
            "a successor",
            lambda: (lead := quorum.agreed_leader(everyone_else)) not in (None, second) and lead,
            120,
        )
        handover_at = quorum.wait_for(
            "its first commit", lambda: first_commit_of(quorum, third, everyone_else, terminated_at)
        )
        return {
            "commit_p50_ms": percentile(latencies, 0.5),
            "commit_p99_ms": percentile(latencies, 0.99),
            "commits": len(latencies),
            "failover_ms": failover_at - killed_at,
            "handover_ms": handover_at - terminated_at,
        }
    finally:
        quorum.stop_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    window_s = 2.0 if args.quick else 5.0
    runs: dict[int, list[dict[str, float]]] = {25: [], 0: []}
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        for r in range(rounds):
            for linger in (25, 0):  # interleaved
                result = one_round(Path(tmp) / f"r{r}-l{linger}", linger, window_s)
                runs[linger].append(result)
                progress(f"round {r + 1} linger {linger} ms: {result}")
    summary = {}
    for linger, results in runs.items():
        for key in ("commit_p50_ms", "commit_p99_ms"):
            summary[f"linger{linger}_{key}"] = median([r[key] for r in results])
    failovers = [r["failover_ms"] for rs in runs.values() for r in rs]
    handovers = [r["handover_ms"] for rs in runs.values() for r in rs]
    summary["failover_ms"] = median(failovers)
    summary["failover_max_ms"] = max(failovers)
    summary["handover_ms"] = median(handovers)
    emit(
        {
            "bench": "raft_quorum",
            "unit": "ms",
            "results": summary,
            "ratios": {
                "failover/(election_timeout+2s)": round(
                    statistics.median(failovers) / (ELECTION_TIMEOUT_MS + 2000), 3
                )
            },
            "params": {"voters": 3, "rounds": rounds, "window_s": window_s, "append_every_ms": 20},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
