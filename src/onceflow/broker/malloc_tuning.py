"""Keep glibc from handing request-sized memory back to the kernel after every request.

A 1 MB Produce request makes a few buffers of about 1 MB each (the frame, kafka-python's copy of the
records). glibc serves blocks that large with ``mmap`` or from the top of the heap and returns them to
the kernel when they are freed (``munmap``, heap trimming), so the next request touches fresh pages:
~480 page faults per MB, which measured as the largest single cost of a 1 MB produce (more than
writing it to the page cache). Raising the mmap and trim thresholds keeps those blocks in the heap
for the next request, as a JVM broker keeps its heap. Memory stays bounded by what concurrent
requests need at once; blocks above ``MMAP_THRESHOLD_BYTES`` (rare: requests up to
socket.request.max.bytes, big fetch answers) still come and go through ``mmap``.

Process-wide, so only the broker process's entry point (``server.run``) calls it, never a library
user's process. A no-op where the C library has no ``mallopt`` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# glibc's malloc.h parameter numbers.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def keep_freed_memory_for_reuse() -> bool:
    """Set the thresholds; True if the C library took them."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.debug("no mallopt in this C library; malloc thresholds left alone")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    log.debug(
        "malloc mmap threshold %d, trim threshold %d: %s", MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES, ok
    )
    return ok
