"""A full disk on demand, for tests of failed writes."""

from __future__ import annotations

import contextlib
import resource
import signal


@contextlib.contextmanager
def file_size_limit(limit: int):
    """No file this process writes can grow past ``limit`` bytes while inside.

    The kernel then writes what fits under the limit and fails the next write with EFBIG (SIGXFSZ is
    ignored meanwhile), as a filling disk writes what fits and then fails with ENOSPC: a real
    part-way failure, with no mock."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
