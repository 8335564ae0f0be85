"""Replaying one ``__consumer_offsets`` partition into offsets and the last metadata of each group.

One pass in log order, the way Kafka's ``GroupMetadataManager`` loads a partition: offset records
and tombstones go straight into the :class:`OffsetStore`; transactional offset records wait as
pending for their producer until a commit or abort marker; for groups, the last record wins (a
tombstone means the group is gone).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from onceflow.broker.group import consumer_group_records as cg
from onceflow.broker.group import log_format as fmt
from onceflow.broker.group.offsets import CommittedOffset, OffsetStore
from onceflow.broker.group.persistence import StoredBatch
from onceflow.protocol.errors import KafkaError

log = logging.getLogger(__name__)


def replay_partition(
    batches: Iterable[StoredBatch],
    offsets: OffsetStore,
    consumer_groups: dict[cg.ConsumerGroupKey, bytes] | None = None,
) -> dict[str, fmt.GroupValue | None]:
    """Offsets go into ``offsets``; returns each classic group's last metadata. Records of
    consumer-protocol groups (KIP-848) go into ``consumer_groups`` by key, a tombstone removing its key."""
    groups: dict[str, fmt.GroupValue | None] = {}
    consumer_groups = {} if consumer_groups is None else consumer_groups
    for batch in batches:
        if batch.control:
            offsets.complete_txn(batch.producer_id, batch.commit)
            continue
        for raw_key, raw_value in batch.records:
            try:
                _apply_record(raw_key, raw_value, batch, offsets, groups, consumer_groups)
            except KafkaError as exc:
                # One unreadable record must not lose every other group on this partition.
                log.warning("skipping unreadable __consumer_offsets record: %s", exc)
    return groups


def _apply_record(
    raw_key: bytes,
    raw_value: bytes | None,
    batch: StoredBatch,
    offsets: OffsetStore,
    groups: dict[str, fmt.GroupValue | None],
    consumer_groups: dict[cg.ConsumerGroupKey, bytes],
) -> None:
    key = fmt.decode_key(raw_key)
    if isinstance(key, cg.ConsumerGroupKey):
        if key.record_type == cg.PARTITION_METADATA:
            return  # recomputed from the topics
        if raw_value is None:
            consumer_groups.pop(key, None)
        else:
            consumer_groups[key] = raw_value
        return
    if isinstance(key, fmt.GroupKey):
        groups[key.group_id] = None if raw_value is None else fmt.decode_group_value(raw_value)
        return
    tp = (key.topic, key.partition)
    if raw_value is None:
        offsets.remove(key.group_id, tp)
        return
    v = fmt.decode_offset_value(raw_value)
    value = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
    if batch.transactional and batch.producer_id >= 0:
        offsets.put_pending(batch.producer_id, key.group_id, tp, value)
    else:
        offsets.put(key.group_id, tp, value)
