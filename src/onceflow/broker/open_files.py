"""The broker's open-file limit: every partition keeps its segments' ``.log`` files open (one descriptor
each) besides one per connection, so the usual soft limit of 1,024 runs out at about a thousand
partitions. ``onceflow serve`` raises the soft limit to the hard one at start, as the limits Kafka's
documentation asks operators to set would; past the hard limit, creating a partition fails with
KAFKA_STORAGE_ERROR and nothing half-made stays behind (``TopicManager``).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# With no hard limit, the most to ask for (the kernel's default nr_open).
UNLIMITED_TARGET = 1_048_576


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (soft before, soft after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
        log.info("raised the open-file limit from %d to %d", soft, target)
        return soft, target
    return soft, soft
