"""The producer-state steps of Log.append and recovery, driven by real record-batch bytes."""

from __future__ import annotations

import pytest

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.producer_append import (
    apply_producer_appends,
    find_duplicate,
    replay_producer_batches,
    validate_producer_batches,
)
from onceflow.log.producer_state import CompletedTxn, ProducerStateManager
from onceflow.protocol import records
from onceflow.protocol.errors import InvalidProducerEpoch, OutOfOrderSequence
from onceflow.protocol.record_codec import encode_batch

TP = "t-0"
PID = 7


def data_batch(first_seq, count, *, pid=PID, epoch=0, txn=False, base_offset=0, ts=1000):
    data = bytearray(
        encode_batch(
            [(b"k", b"v")] * count,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=first_seq,
            transactional=txn,
            base_offset=base_offset,
            timestamp_ms=ts,
        )
    )
    return records.read_header(data), memoryview(data)


def marker(*, commit, epoch=0, coordinator_epoch=0, base_offset=0, pid=PID):
    data = bytearray(
        records.build_control_batch(
            pid,
            epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=2000,
            base_offset=base_offset,
        )
    )
    return records.read_header(data), memoryview(data)


def append(state, batches, next_offset, origin=AppendOrigin.CLIENT, append_time_ms=-1):
    """Log.append's producer-state part: duplicate check, validate, (write), apply."""
    if origin is AppendOrigin.CLIENT:
        duplicate = find_duplicate(state, batches)
        if duplicate is not None:
            return ("duplicate", duplicate.first_offset, duplicate.last_offset)
    appends = validate_producer_batches(
        state, batches, next_offset=next_offset, origin=origin, append_time_ms=append_time_ms
    )
    end = next_offset + sum(h.last_offset_delta + 1 for h, _ in batches)
    return ("appended", apply_producer_appends(state, appends, end), end)


def test_client_batches_get_checked_at_the_offsets_they_will_receive():
    state = ProducerStateManager(TP)
    assert append(state, [data_batch(0, 3), data_batch(3, 2)], 10) == ("appended", [], 15)
    entry = state.last_entry(PID)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 10, 12),
        (3, 4, 13, 14),
    ]
    assert state.map_end_offset == 15
    assert append(state, [data_batch(0, 3)], 15) == ("duplicate", 10, 12)


def test_a_rejected_batch_rejects_the_whole_append_and_changes_nothing():
    state = ProducerStateManager(TP)
    append(state, [data_batch(0, 3, epoch=2)], 0)
    client = AppendOrigin.CLIENT
    with pytest.raises(OutOfOrderSequence):
        validate_producer_batches(
            state, [data_batch(3, 1, epoch=2), data_batch(9, 1, epoch=2)], next_offset=3, origin=client
        )
    with pytest.raises(InvalidProducerEpoch):
        validate_producer_batches(state, [data_batch(3, 1, epoch=1)], next_offset=3, origin=client)
    assert state.last_entry(PID).last_seq == 2
    assert state.map_end_offset == 3


def test_batches_without_a_producer_id_are_ignored_but_still_take_offsets():
    state = ProducerStateManager(TP)
    plain = data_batch(-1, 4, pid=-1, epoch=-1)
    assert append(state, [plain, data_batch(0, 1)], 0) == ("appended", [], 5)
    assert state.last_entry(PID).batches[0].first_offset == 4
    assert state.last_entry(-1) is None


def test_log_append_time_replaces_the_batch_timestamp():
    state = ProducerStateManager(TP)
    append(state, [data_batch(0, 1, ts=1000)], 0, append_time_ms=5555)
    assert state.last_entry(PID).last_timestamp == 5555


def test_commit_marker_from_the_coordinator_completes_the_transaction():
    state = ProducerStateManager(TP)
    append(state, [data_batch(0, 2, txn=True)], 0)
    assert state.first_unstable_offset() == 0
    result = append(state, [marker(commit=True, coordinator_epoch=4)], 2, origin=AppendOrigin.COORDINATOR)
    assert result == ("appended", [CompletedTxn(PID, 0, 2, is_aborted=False)], 3)
    state.complete_txn(result[1][0])
    assert state.first_unstable_offset() is None
    assert state.last_entry(PID).coordinator_epoch == 4


def test_replay_rebuilds_the_same_state_from_stored_batches():
    live = ProducerStateManager(TP)
    stored = []
    offset = 0
    for batch in [
        data_batch(0, 2),
        data_batch(0, 1, pid=9, txn=True),
        data_batch(2, 3),
        data_batch(-1, 2, pid=-1, epoch=-1),
        data_batch(1, 1, pid=9, txn=True),
        marker(commit=False, pid=9),
        data_batch(5, 1),
    ]:
        header, view = batch
        records.set_base_offset(view, 0, offset)  # what Log.append writes
        stored.append((records.read_header(view), view))
        result = append(
            live,
            [batch],
            offset,
            origin=AppendOrigin.COORDINATOR if header.is_control else AppendOrigin.CLIENT,
        )
        for completed in result[1]:
            live.complete_txn(completed)
        offset = result[2]
    recovered = ProducerStateManager(TP)
    assert replay_producer_batches(recovered, stored, 0) == 6
    assert recovered.active_producers() == live.active_producers()
    assert recovered.map_end_offset == live.map_end_offset == offset
    assert recovered.first_unstable_offset() is None
    partial = ProducerStateManager(TP)
    assert replay_producer_batches(partial, stored, 3) == 4  # batches ending before offset 3 are skipped
