"""Sweep many more seeds of the quorum simulator than CI does, on every core:

    PYTHONPATH=src python -m tests.raft.run_seeds --first 10000 --count 100000 --jobs 4

Prints each failing seed with what broke (replay one with ``pytest tests/raft --raft-seed=N``),
then a summary line; exits 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import sys
import time

from tests.raft.sim import InvariantViolation, Scenario, Simulation


def run_one(seed: int) -> tuple[int, int, str | None]:
    try:
        sim = Simulation(Scenario.draw(seed)).run()
    except InvariantViolation as exc:
        return seed, 0, str(exc)
    return seed, sim.steps, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--count", type=int, default=10_000, help="how many seeds (default 10000)")
    parser.add_argument(
        "--jobs", type=int, default=multiprocessing.cpu_count(), help="processes (default: cores)"
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    started = time.monotonic()
    failures = steps = done = 0
    seeds = range(args.first, args.first + args.count)
    with multiprocessing.Pool(args.jobs) as pool:
        for seed, seed_steps, failure in pool.imap_unordered(run_one, seeds, chunksize=20):
            done += 1
            steps += seed_steps
            if failure is not None:
                failures += 1
                print(
                    f"FAIL {failure}\n  replay: pytest tests/raft/test_simulation.py --raft-seed={seed}",
                    flush=True,
                )
            if done % 1000 == 0:
                print(f"{done} seeds, {failures} failed, {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(
        f"{done} schedules (seeds {args.first}..{args.first + args.count - 1}), {steps} steps, "
        f"{failures} failed, {time.monotonic() - started:.1f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
