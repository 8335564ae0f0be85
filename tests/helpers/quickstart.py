"""Run ``onceflow quickstart`` as a test does: a subprocess whose whole tree is gone afterwards.

The quickstart starts brokers and Spark drivers in process groups (sessions) of their own, so
killing the quickstart process when a test times out would leave them running, loading a busy
machine further and holding ports. :func:`run_quickstart` kills every process group whose command
line names the quickstart's data dir once the quickstart has ended, however it ended. It also reads
the report table the quickstart prints into a dict (step name -> result).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def run_quickstart(
    command: list[str], data_dir: Path, *, timeout: float, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """``command`` (ending in the quickstart's arguments, which name ``data_dir``) until it exits or
    ``timeout`` passes; then nothing that names ``data_dir`` is left running."""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stderr += f"\n(the quickstart did not finish within {timeout:.0f} s and was killed)"
    finally:
        kill_process_groups_naming(data_dir)
        proc.wait()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return result, report_of(stdout)


def report_of(stdout: str) -> dict[str, str]:
    """The quickstart's report table as step name -> result (a wrapped cell's first line only)."""
    return {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in stdout.splitlines()
        if line.count("│") >= 3 and line.split("│")[1].strip()
    }


def kill_process_groups_naming(path: Path) -> None:
    """SIGKILL the process group of every process whose command line names ``path`` (not ours)."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(path).encode() in (entry / "cmdline").read_bytes():
                groups.add(os.getpgid(int(entry.name)))
        except (OSError, ProcessLookupError):
            continue
    groups.discard(os.getpgid(0))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
