"""The quickstart's child processes die with it, even when it is killed with SIGKILL (a test's
timeout, ``kill -9``): its broker used to run on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A stand-in for the quickstart: starts its broker as the quickstart does, prints the broker's pid,
# then waits to be killed.
PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from onceflow.cli.quickstart import BrokerChild
    broker = BrokerChild(Path(sys.argv[1]))
    broker.start()
    print(broker._proc.pid, flush=True)
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_killed_quickstart_leaves_no_broker(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    broker_pid = None
    try:
        broker_pid = int(parent.stdout.readline())
        parent.kill()  # SIGKILL: the quickstart's own clean-up cannot run
        parent.wait()
        assert gone(broker_pid, 60), "the broker outlived the quickstart that started it"
        # It was stopped by SIGTERM, cleanly: its logs are marked so (no recovery at the next start).
        assert "broker on port" in (tmp_path / "broker.log").read_text()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if broker_pid is not None and alive(broker_pid):
            os.kill(broker_pid, signal.SIGKILL)
