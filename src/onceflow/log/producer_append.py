"""The producer-state steps of ``Log.append`` and ``Log`` recovery, over record-batch headers.

``Log`` calls these so that it never reaches into ``ProducerAppendInfo`` itself:

1. ``find_duplicate(state, batches)`` (client appends only): a hit means "answer with these offsets,
   write nothing";
2. ``validate_producer_batches(state, batches, next_offset=..., origin=...)`` before the write: one
   ``ProducerAppendInfo`` per producer, every batch checked at the offset it is about to get; raises the
   Kafka error and nothing has changed;
3. ``apply_producer_appends(state, appends, log_end_offset)`` after the write; the returned completed
   transactions go to the transaction index and then ``state.complete_txn``;
4. ``replay_producer_batches(state, batches, from_offset)`` in recovery, after ``load_latest`` /
   ``truncate_and_reload``: the same path with ``AppendOrigin.REPLICATION``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.producer_append_info import ProducerAppendInfo
from onceflow.log.producer_entry import BatchMetadata, CompletedTxn
from onceflow.log.producer_state import ProducerStateManager
from onceflow.protocol.records import CONTROL_TYPE_COMMIT, NO_PRODUCER_ID, BatchHeader, read_control_record

Batch = tuple[BatchHeader, memoryview]


@dataclass(slots=True)
class ProducerAppends:
    """The validated producer-state effect of one append, applied once the bytes are written."""

    infos: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    completed_txns: list[CompletedTxn] = field(default_factory=list)


def find_duplicate(state: ProducerStateManager, batches: Sequence[Batch]) -> BatchMetadata | None:
    """The cached batch that one of ``batches`` resends, if any (Kafka answers the request with it)."""
    for header, _ in batches:
        if header.producer_id == NO_PRODUCER_ID:
            continue
        duplicate = state.find_duplicate_batch(
            header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence
        )
        if duplicate is not None:
            return duplicate
    return None


def validate_producer_batches(
    state: ProducerStateManager,
    batches: Sequence[Batch],
    *,
    next_offset: int,
    origin: AppendOrigin,
    append_time_ms: int = -1,
) -> ProducerAppends:
    """Check every producer batch at the offset it will get; changes nothing in ``state``.

    Offsets are assigned from ``next_offset`` (the log end) as ``Log`` does, except that replicated
    batches keep their stored offsets. ``append_time_ms`` >= 0 (LogAppendTime topics) replaces the
    batches' max timestamps. Raises ``InvalidProducerEpoch``, ``OutOfOrderSequence``,
    ``InvalidTxnState`` or a coordinator-fenced error.
    """
    appends = ProducerAppends()
    for header, view in batches:
        first_offset = header.base_offset if origin is AppendOrigin.REPLICATION else next_offset
        next_offset = first_offset + header.last_offset_delta + 1
        if header.producer_id == NO_PRODUCER_ID:
            continue
        _append_one(state, appends, header, view, first_offset, origin, append_time_ms)
    return appends


def apply_producer_appends(
    state: ProducerStateManager, appends: ProducerAppends, log_end_offset: int
) -> list[CompletedTxn]:
    """Merge validated appends (after the write); returns the transactions their markers completed."""
    for info in appends.infos.values():
        state.update(info)
    state.update_map_end_offset(log_end_offset)
    return list(appends.completed_txns)


def replay_producer_batches(
    state: ProducerStateManager,
    batches: Iterable[Batch],
    from_offset: int,
    complete_txn: Callable[[CompletedTxn], None] | None = None,
) -> int:
    """Rebuild producer state from stored batches at or after ``from_offset``; returns how many were used.

    Each batch is applied on its own, as in Kafka's recovery, and completed transactions are closed at
    once through ``complete_txn`` (default ``state.complete_txn``; ``Log`` passes its own, which also
    rebuilds the transaction index).
    """
    complete = complete_txn or state.complete_txn
    used = 0
    for header, view in batches:
        if header.last_offset < from_offset:
            continue
        if header.producer_id != NO_PRODUCER_ID:
            appends = ProducerAppends()
            _append_one(
                state, appends, header, view, header.base_offset, AppendOrigin.REPLICATION, append_time_ms=-1
            )
            for completed in apply_producer_appends(state, appends, header.last_offset + 1):
                complete(completed)
            used += 1
        else:
            state.update_map_end_offset(header.last_offset + 1)
    return used


def _append_one(
    state: ProducerStateManager,
    appends: ProducerAppends,
    header: BatchHeader,
    view: memoryview,
    first_offset: int,
    origin: AppendOrigin,
    append_time_ms: int,
) -> None:
    info = appends.infos.get(header.producer_id)
    if info is None:
        info = appends.infos[header.producer_id] = state.prepare_update(header.producer_id, origin)
    timestamp = append_time_ms if append_time_ms >= 0 else header.max_timestamp
    if header.is_control:
        control_type, coordinator_epoch = read_control_record(view)
        completed = info.append_end_txn_marker(
            is_commit=control_type == CONTROL_TYPE_COMMIT,
            coordinator_epoch=coordinator_epoch,
            epoch=header.producer_epoch,
            offset=first_offset,
            timestamp=timestamp,
        )
        if completed is not None:
            appends.completed_txns.append(completed)
        return
    info.append_data_batch(
        header.producer_epoch,
        header.base_sequence,
        header.last_sequence,
        timestamp,
        first_offset,
        first_offset + header.last_offset_delta,
        header.is_transactional,
    )
