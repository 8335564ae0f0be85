"""The coordinators' events, counted from what they wrote: offsets committed and rebalances from
``__consumer_offsets``, transactions committed and aborted (and how long their commits took) from
``__transaction_state``.

The coordinators are not instrumented: each scrape reads the batches appended to their partitions
since the last one (up to the high watermark: what is committed) and counts them. The records are
Kafka's, so this reads exactly what happened, whatever the coordinators' code looks like:

- an offset commit is one offset record; a transactional one (TxnOffsetCommit) counts when its
  transaction's COMMIT marker arrives, and not at all if it is aborted;
- a rebalance is a group record with a new generation (classic groups), or a new group epoch
  (consumer groups, KIP-848), as Kafka counts completed rebalances and epoch bumps;
- a transaction committed or aborted is a CompleteCommit or CompleteAbort record; its commit time is
  from its PrepareCommit record (EndTxn accepted) to its CompleteCommit (every marker written), from
  the records' update timestamps (ms).

Counting starts where the logs end when the broker starts serving (:meth:`CoordinatorLogs.start`);
a partition that appears later is read from its start. A scrape reads at most ``max_bytes`` per
topic; what is left is read by the next one, so a burst delays the counts without losing any.
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.broker.group import consumer_group_records as cg
from onceflow.broker.group import log_format as group_format
from onceflow.broker.metrics.families import Families, exporter_default, jmx
from onceflow.broker.metrics.histogram import Histogram
from onceflow.broker.txn import log_format as txn_format
from onceflow.protocol.errors import KafkaError
from onceflow.protocol.record_codec import decode_batches

log = logging.getLogger(__name__)

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

# Kafka's TransactionState ids, as the records carry them.
PREPARE_COMMIT = 2
PREPARE_ABORT = 3
COMPLETE_COMMIT = 4
COMPLETE_ABORT = 5


class _Tail:
    """Where reading each partition of one topic goes on from."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.next_offset: dict[int, int] = {}
        self.started = False

    def start(self, topics: Any) -> None:
        t = topics.get(self.topic)
        for partition in t.partitions if t is not None else ():
            if partition.log is not None:  # a cluster broker holds only some coordinator partitions
                self.next_offset[partition.index] = partition.log.high_watermark
        self.started = True

    def read(self, topics: Any, max_bytes: int, on_batch: Any) -> None:
        """Hand every new batch (decoded) to ``on_batch(partition, batch)``, oldest first."""
        t = topics.get(self.topic)
        if t is None or not self.started:
            return
        budget = max_bytes
        for partition in t.partitions:
            plog = partition.log
            if plog is None:
                continue  # coordinated by another broker of the cluster, which counts it
            offset = max(self.next_offset.get(partition.index, 0), plog.log_start_offset)
            upper = plog.high_watermark
            for header, view in plog.iter_batches(offset) if offset < upper else ():
                last = header.base_offset + header.last_offset_delta
                if header.base_offset >= upper or budget <= 0:
                    break
                offset = last + 1
                if last < self.next_offset.get(partition.index, 0):
                    continue  # the batch holding the offset to go on from began before it
                budget -= len(view)
                try:
                    batches = list(decode_batches(view, check_crc=False))
                except KafkaError as exc:
                    log.debug("%s-%d: skipping an unreadable batch: %s", self.topic, partition.index, exc)
                    continue
                for batch in batches:
                    on_batch(partition.index, batch)
            self.next_offset[partition.index] = offset


class GroupEvents:
    """Offsets committed and rebalances, from ``__consumer_offsets``."""

    def __init__(self) -> None:
        self.tail = _Tail(CONSUMER_OFFSETS)
        self.offset_commits = 0
        self.classic_rebalances = 0
        self.consumer_rebalances = 0
        self._generations: dict[str, int] = {}  # classic group -> last generation seen
        self._epochs: dict[str, int] = {}  # consumer group -> last group epoch seen
        self._pending: dict[tuple[int, int], int] = {}  # (partition, producer id) -> txn offset commits

    def read(self, topics: Any, max_bytes: int) -> None:
        self.tail.read(topics, max_bytes, self._batch)

    def _batch(self, partition: int, batch: Any) -> None:
        header = batch.header
        if batch.control is not None:
            pending = self._pending.pop((partition, header.producer_id), 0)
            if batch.control.commit:
                self.offset_commits += pending
            return
        commits = 0
        for record in batch.records:
            if record.key is None:
                continue
            try:
                key = group_format.decode_key(record.key)
                if isinstance(key, group_format.OffsetKey):
                    commits += record.value is not None
                elif isinstance(key, group_format.GroupKey):
                    self._group_record(key.group_id, record.value)
                elif key.record_type == cg.GROUP_EPOCH:
                    self._epoch_record(key.group_id, record.value)
            except KafkaError as exc:
                log.debug("__consumer_offsets-%d: skipping a record: %s", partition, exc)
        if header.is_transactional:
            key = (partition, header.producer_id)
            self._pending[key] = self._pending.get(key, 0) + commits
        else:
            self.offset_commits += commits

    def _group_record(self, group_id: str, value: bytes | None) -> None:
        if value is None:
            self._generations.pop(group_id, None)
            return
        generation = group_format.decode_group_value(value).generation
        if generation > self._generations.get(group_id, -1):
            self._generations[group_id] = generation
            if generation > 0:  # generation 0: a group that never completed a join (offsets only)
                self.classic_rebalances += 1

    def _epoch_record(self, group_id: str, value: bytes | None) -> None:
        if value is None:
            self._epochs.pop(group_id, None)
            return
        epoch = cg.decode_epoch(value)
        if epoch > self._epochs.get(group_id, -1):
            self._epochs[group_id] = epoch
            if epoch > 0:
                self.consumer_rebalances += 1

    def collect(self, families: Families) -> None:
        meaning = "Offsets committed (transactional ones once their transaction commits)."
        families.untyped(
            exporter_default("server", "group-coordinator-metrics", "offset-commit-count"),
            meaning,
            self.offset_commits,
        )
        families.untyped(
            exporter_default("server", "group-coordinator-metrics", "group-completed-rebalance-count"),
            "Rebalances completed by classic groups (new generations).",
            self.classic_rebalances,
        )
        families.untyped(
            exporter_default("server", "group-coordinator-metrics", "consumer-group-rebalance-count"),
            "Rebalances of consumer-protocol groups (KIP-848 group epoch bumps).",
            self.consumer_rebalances,
        )


class TransactionEvents:
    """Transactions committed and aborted, and commit times, from ``__transaction_state``."""

    def __init__(self) -> None:
        self.tail = _Tail(TRANSACTION_STATE)
        self.commits = 0
        self.aborts = 0
        self.commit_time = Histogram()
        self._prepared: dict[str, int] = {}  # transactional id -> PrepareCommit's update time (ms)

    def read(self, topics: Any, max_bytes: int) -> None:
        self.tail.read(topics, max_bytes, self._batch)

    def _batch(self, partition: int, batch: Any) -> None:
        for record in batch.records:
            if record.key is None:
                continue
            try:
                tid = txn_format.decode_key(record.key)
                value = txn_format.decode_value(record.value)
            except KafkaError as exc:
                log.debug("__transaction_state-%d: skipping a record: %s", partition, exc)
                continue
            if value is None:
                self._prepared.pop(tid, None)
                continue
            status = value.transaction_status
            if status == PREPARE_COMMIT:
                self._prepared[tid] = value.transaction_last_update_timestamp_ms
            elif status == COMPLETE_COMMIT:
                self.commits += 1
                prepared = self._prepared.pop(tid, None)
                if prepared is not None:
                    self.commit_time.observe(max(value.transaction_last_update_timestamp_ms - prepared, 0))
            elif status == COMPLETE_ABORT:
                self.aborts += 1
                self._prepared.pop(tid, None)

    def collect(self, families: Families) -> None:
        families.counter(
            jmx("coordinator_transaction", "TransactionStateManager", "CommitsPerSec"),
            "Transactions committed (CompleteCommit written).",
            self.commits,
        )
        families.counter(
            jmx("coordinator_transaction", "TransactionStateManager", "AbortsPerSec"),
            "Transactions aborted (CompleteAbort written), by their producer or on a timeout.",
            self.aborts,
        )
        families.histogram(
            jmx("coordinator_transaction", "TransactionStateManager", "CommitTimeMs"),
            "EndTxn(commit) accepted -> every marker written (PrepareCommit -> CompleteCommit), in ms.",
            self.commit_time,
        )


class CoordinatorLogs:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.groups = GroupEvents()
        self.transactions = TransactionEvents()
        self.max_bytes = max_bytes

    def start(self, topics: Any) -> None:
        """Count from here: what the logs hold now happened before this broker started."""
        self.groups.tail.start(topics)
        self.transactions.tail.start(topics)

    def collect(self, families: Families, topics: Any) -> None:
        self.groups.read(topics, self.max_bytes)
        self.transactions.read(topics, self.max_bytes)
        self.groups.collect(families)
        self.transactions.collect(families)
