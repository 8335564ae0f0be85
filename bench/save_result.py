"""Run a benchmark and keep its JSON line with the command, the date and the machine it ran on.

    python bench/save_result.py [--as NAME] -- python bench/transactions.py [args]

The benchmark's progress still goes to stderr. Its last stdout line (one JSON object, see
``_common.emit``) is written to ``bench/results/<NAME>.json`` (NAME defaults to the JSON's
``"bench"``), wrapped as ``{"command", "date", "machine", "load_average_1m", "result"}``.
``bench/report.py`` makes docs/benchmarks.md's table and plots from these files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """What the figures depend on: CPUs, memory, kernel, Python, and the OS's name."""
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    os_name = platform.system()
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME", os_name)
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "os": os_name,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--as", dest="name", help="file name under bench/results (default: the bench's name)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the benchmark's command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the benchmark's command after --")
    load_start = round(os.getloadavg()[0], 2)
    started = datetime.datetime.now(datetime.UTC)
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        print(f"{shlex.join(command)} failed with exit status {run.returncode}", file=sys.stderr)
        return 1
    result = json.loads(lines[-1])
    saved = {
        "command": shlex.join(["python" if c == sys.executable else c for c in command]),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "result": result,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name or result['bench']}.json"
    path.write_text(json.dumps(saved, indent=1) + "\n")
    print(lines[-1])
    print(f"saved to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
