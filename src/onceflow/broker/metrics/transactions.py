"""The transaction coordinator's state, read at scrape time through the entry points
ListTransactions and DescribeTransactions use: transactions per state, and hanging transactions.

A transaction *hangs* (KIP-664; what ``onceflow txn find-hanging`` looks for) when a partition holds
it open, so that its last stable offset cannot move, while the coordinator does not know it as an
open transaction of that producer on that partition (a producer fenced or expired after its write,
markers that never came), or when its producer last wrote more than ``transaction.max.timeout.ms``
ago. Open means Ongoing or preparing: a transaction between EndTxn and its markers is finishing, not
hanging. The count is of (partition, producer) pairs; aborting one (``onceflow txn abort``) clears it.
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.broker.metrics.families import Families, jmx
from onceflow.protocol.errors import KafkaError

log = logging.getLogger(__name__)

# Kafka's TransactionState names, Dead aside (ListTransactions never shows it).
STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
)
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def collect_transactions(
    families: Families, coordinator: Any, topics: Any, now_ms: int, max_timeout_ms: int
) -> None:
    try:
        listed = coordinator.list_transactions().transactions
    except KafkaError as exc:  # still loading __transaction_state
        log.debug("transactions not collected: %s", exc)
        return
    per_state = dict.fromkeys(STATES, 0)
    for t in listed:
        per_state[t.state] = per_state.get(t.state, 0) + 1
    for state, n in per_state.items():
        families.gauge(
            jmx("coordinator_transaction", "TransactionStateManager", "NumTransactions"),
            "Transactional ids per transaction state.",
            n,
            {"state": state},
        )
    families.gauge(
        jmx("coordinator_transaction", "TransactionStateManager", "HangingTransactions"),
        "Open transactions of partitions that the coordinator does not know or that ran past "
        "transaction.max.timeout.ms ((partition, producer) pairs).",
        len(hanging_transactions(coordinator, topics, listed, now_ms, max_timeout_ms)),
    )


def hanging_transactions(
    coordinator: Any, topics: Any, listed: list[Any], now_ms: int, max_timeout_ms: int
) -> list[tuple[str, int, int]]:
    """``(topic, partition, producer id)`` of every hanging transaction (see the module's docstring)."""
    candidates = []
    for topic in topics:
        for partition in topic.partitions:
            if partition.log is None:
                continue  # on another broker of the cluster
            state = partition.log.producer_state
            if state.first_unstable_offset() is None:
                continue  # the usual case: nothing open here
            for txn in state.ongoing_transactions():
                entry = state.last_entry(txn.producer_id)
                candidates.append((topic.name, partition.index, txn.producer_id, entry))
    if not candidates:
        return []
    wanted = {pid for _, _, pid, _ in candidates}
    tids = sorted(t.transactional_id for t in listed if t.producer_id in wanted and t.state in OPEN_STATES)
    open_here: set[tuple[str, int, int]] = set()
    for d in coordinator.describe_transactions(tids) if tids else ():
        if d.error_code or d.state not in OPEN_STATES:
            continue
        for topic, indexes in (d.topics or {}).items():
            open_here.update((topic, index, d.producer_id) for index in indexes)
    hanging = []
    for topic, index, pid, entry in candidates:
        last = entry.last_timestamp if entry is not None else -1
        too_old = last >= 0 and now_ms - last > max_timeout_ms
        if too_old or (topic, index, pid) not in open_here:
            hanging.append((topic, index, pid))
    return hanging
