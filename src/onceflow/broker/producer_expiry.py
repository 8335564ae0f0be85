"""The broker's periodic producer-id expiry: every ``producer.id.expiration.check.interval.ms`` each
partition forgets producers idle for ``producer.id.expiration.ms`` (``Log.remove_expired_producers``).

An expired producer that comes back may start at any sequence (KIP-360), exactly as a new one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600000  # Kafka's producer.id.expiration.check.interval.ms


def expire_producers(topics: Any) -> int:
    """One pass over every partition; returns how many producers expired."""
    expired = 0
    for partition in topics.partitions():
        try:
            expired += len(partition.log.remove_expired_producers())
        except Exception:
            log.exception("producer expiry failed for %s-%d", partition.topic, partition.index)
    return expired


async def run_producer_expiry(
    topics: Any, interval_ms: int = PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS
) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000.0)
        expired = expire_producers(topics)
        if expired:
            log.info("expired %d idle producer id(s)", expired)
