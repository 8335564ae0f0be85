"""Which partition of an internal topic holds a key: Kafka's ``Utils.abs(key.hashCode()) % n``.

The group coordinator hashes group ids onto ``__consumer_offsets`` and the transaction coordinator
transactional ids onto ``__transaction_state`` (and, for AddOffsetsToTxn, group ids onto
``__consumer_offsets``): one function, so the two can never disagree about where a group lives.
"""

from __future__ import annotations

import functools


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, int32 wrap-around)."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


# Producers and groups send the same few ids with every request: remember the answers (bounded, so a
# flood of distinct ids cannot grow it without limit).
@functools.lru_cache(maxsize=8192)
def partition_for_key(key: str, num_partitions: int) -> int:
    """``Utils.abs(hash) % n``; Kafka's ``Utils.abs`` maps Integer.MIN_VALUE to 0, not to itself."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
