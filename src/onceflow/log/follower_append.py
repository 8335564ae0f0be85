"""A follower's append: the leader's batches, as fetched, with the leader's offsets and epochs.

Kafka's ``UnifiedLog.appendAsFollower``. The bytes a Fetch answered are checked (framing, magic, CRC:
a damaged batch is refused, never stored), whole batches the log already has are skipped, and the
rest go to ``Log.append`` with ``AppendOrigin.REPLICATION``: offsets and leader epochs are kept, and
every producer batch and transaction marker runs through the same producer-state validation as on the
leader (origin REPLICATION only logs what the leader already judged), so the transaction index, the
LSO and the five cached batches per producer are the leader's. That is why a follower that becomes
leader answers a producer's retried batch as a duplicate with its original offset, with no load step.

A Fetch answer may end with part of a batch (a byte limit cut it): that part is dropped and fetched
again. The first batch may start below the log end only when the log is empty at the leader's log start
(DeleteRecords moved the start inside a batch): the log then restarts at the batch's base, as Kafka's.
"""

from __future__ import annotations

from typing import NamedTuple

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.log import Log
from onceflow.protocol.errors import CorruptMessage, KafkaError, KafkaStorageError
from onceflow.protocol.records import BatchHeader, batch_size_at, scan_batches

Batch = tuple[BatchHeader, memoryview]


class UnexpectedAppendOffset(KafkaError):
    """Fetched batches that do not continue the log (the fetch state and the log disagree)."""

    code = KafkaStorageError.code


class FollowerAppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    last_leader_epoch: int  # the epoch of the last appended batch (the fetch's next lastFetchedEpoch)
    valid_bytes: int


def fetched_batches(data: bytes | bytearray | memoryview) -> list[Batch]:
    """The whole, CRC-checked batches of a Fetch answer; a cut-off tail is dropped, a damaged batch raises
    ``CorruptMessage``."""
    batches, valid = scan_batches(data)
    if valid < len(data):
        size = batch_size_at(data, valid)
        if size is not None and valid + size <= len(data):
            raise CorruptMessage(f"fetched batch at byte {valid} of {len(data)} is damaged")
    return batches


def append_as_follower(log: Log, data: bytes | bytearray | memoryview) -> FollowerAppendResult | None:
    """Append what the leader sent from the log end on; None when nothing new arrived."""
    end = log.log_end_offset
    batches = [(h, v) for h, v in fetched_batches(data) if h.last_offset >= end]
    if not batches:
        return None
    first = batches[0][0]
    if first.base_offset < end:
        if end != log.log_start_offset:
            raise UnexpectedAppendOffset(
                f"fetched batch [{first.base_offset}, {first.last_offset}] of {log.directory.name} starts "
                f"below the log end {end}"
            )
        log.truncate_fully_and_start_at(first.base_offset)
    result = log.append(batches, origin=AppendOrigin.REPLICATION)
    last = batches[-1][0]
    return FollowerAppendResult(
        result.base_offset, result.last_offset, last.partition_leader_epoch, sum(len(v) for _, v in batches)
    )
