"""Child processes that die with the command that started them.

The quickstart runs a broker (or a cluster's nodes) and Spark drivers as child processes and stops
them itself when it ends; but a quickstart killed from outside (a test's timeout, ``kill -9``, a
closed terminal's SIGHUP after the quickstart was stopped) could not, and its broker ran on. On
Linux a child asks the kernel to signal it when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which
holds even for SIGKILL; elsewhere nothing is arranged (the quickstart's own ``finally`` stops them).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process dies (for
    a broker SIGTERM, its clean stop). None where the platform has no such call. Call it from the
    thread that lives as long as the child should: the kernel signals when that thread ends."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing but the call happens after fork
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: nobody would signal us
            os.kill(os.getpid(), sig)

    return set_parent_death_signal
