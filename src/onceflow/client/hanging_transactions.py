"""Finding hanging transactions (KIP-664), as Kafka's ``kafka-transactions.sh find-hanging``: used
by ``onceflow txn find-hanging`` and the console's transactions page.

A transaction *hangs* on a partition when the partition still holds it open (its first offset keeps
the last stable offset back, so read_committed consumers stop there) while its coordinator does
not know it as an ongoing transaction of that producer touching that partition, or when it has run
longer than ``transaction.max.timeout.ms``. Aborting it (``AsyncAdminClient.abort_transaction``)
writes an ABORT marker, after which the LSO moves on.
"""

from __future__ import annotations

import time

from onceflow.client.admin import AsyncAdminClient, ProducerState, TransactionDescription
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.errors import KafkaError

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # the broker's transaction.max.timeout.ms default


async def open_transactions(
    admin: AsyncAdminClient, topic: str | None = None
) -> list[tuple[TopicPartition, ProducerState]]:
    """Every producer with an open transaction in ``topic`` (default: every non-internal topic)."""
    # One Metadata request; a named topic that does not exist raises UNKNOWN_TOPIC_OR_PARTITION.
    topics = await admin.describe_topics(None if topic is None else [topic])
    tps = [TopicPartition(name, p) for name, info in sorted(topics.items()) for p in sorted(info.partitions)]
    if not tps:
        return []
    found = []
    for tp, producers in (await admin.describe_producers_of(tps)).items():
        if isinstance(producers, KafkaError):
            continue  # e.g. deleted since it was listed
        found += [(tp, p) for p in producers if p.current_transaction_start_offset >= 0]
    return found


async def find_hanging(
    admin: AsyncAdminClient,
    topic: str | None = None,
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    *,
    now_ms: int | None = None,
) -> list[tuple[TopicPartition, ProducerState]]:
    """The open transactions of ``topic`` (or every topic) that hang, as ``(partition, producer)``."""
    candidates = await open_transactions(admin, topic)
    if not candidates:
        return []
    listed = await admin.list_transactions(producer_ids=sorted({c[1].producer_id for c in candidates}))
    by_pid: dict[int, list[str]] = {}
    for t in listed:
        by_pid.setdefault(t.producer_id, []).append(t.transactional_id)
    described: dict[str, TransactionDescription] = {}
    for tid in sorted({tid for tids in by_pid.values() for tid in tids}):
        try:
            described[tid] = await admin.describe_transaction(tid)
        except KafkaError:
            continue  # expired or gone since it was listed: its transactions count as unknown
    now = int(time.time() * 1000) if now_ms is None else now_ms
    hanging = []
    for tp, producer in candidates:
        ongoing = two_phase = False
        for tid in by_pid.get(producer.producer_id, []):
            d = described.get(tid)
            if d is None or d.state != "Ongoing" or d.producer_epoch < producer.producer_epoch:
                continue
            if tp in d.partitions:
                ongoing = True
                two_phase = two_phase or d.is_two_phase_commit
        # A prepared two-phase commit transaction (KIP-939) has no timeout: however old, it waits for
        # its external coordinator, and aborting it here would break that coordinator's atomicity.
        too_old = (
            not two_phase
            and producer.last_timestamp >= 0
            and now - producer.last_timestamp > max_transaction_timeout_ms
        )
        if not ongoing or too_old:
            hanging.append((tp, producer))
    return hanging
