"""The one switch for partition replication: until brokers replicate partitions (the next issue), a
partition has exactly one copy, so a user topic asking for more replicas is refused rather than
given replicas that would never hold data. Internal topics are created with one replica meanwhile.
The replication work sets :data:`REPLICATION_AVAILABLE` and this check goes away.
"""

from __future__ import annotations

from typing import Any

REPLICATION_AVAILABLE = True


def replication_factor_refusal(ctx: Any, topic: Any) -> str | None:
    """Why a CreateTopics entry cannot be made while replication is not available, or None."""
    if REPLICATION_AVAILABLE:
        return None
    if topic.assignments:
        counts = {len(a.broker_ids) for a in topic.assignments}
        factor = max(counts) if counts else 1
    elif topic.replication_factor == -1:
        factor = ctx.config.default_replication_factor
    else:
        factor = topic.replication_factor
    if factor <= 1:
        return None
    return (
        f"replication factor {factor} is not available yet: onceflow does not replicate partitions so far "
        "(each partition has one copy); create the topic with replication factor 1"
    )
