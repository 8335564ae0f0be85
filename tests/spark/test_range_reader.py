"""fetch_to_arrow: the columnar read of one fetch keeps exactly the records the client's
read_committed filter keeps, in the offset range asked for."""

import pyarrow as pa
import pytest

from onceflow.client.fetch_records import filter_batches
from onceflow.protocol.record_codec import (
    ProducerRecord,
    decode_batches,
    decode_record_objects,
    encode_batch,
    rebuild_batch,
    split_batches,
)
from onceflow.protocol.records import build_control_batch
from onceflow.spark.range_reader import ARROW_SCHEMA, fetch_to_arrow

COMMITTED_PID, ABORTED_PID = 7, 8


def _txn_batch(pid: int, base_offset: int, n: int) -> bytes:
    records = [(b"k%d" % (base_offset + i), b"v%d" % (base_offset + i)) for i in range(n)]
    return encode_batch(
        records,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=base_offset,
        transactional=True,
        timestamp_ms=5000,
    )


def _fetch() -> bytes:
    """0-2 plain; 3-4 committed txn, 5-6 aborted txn, 7 commit marker, 8 abort marker; 9-10 plain
    with headers and log-append time; a trailing partial batch."""
    plain = encode_batch([(None, b"a"), (b"b", b"bb"), (b"c", None)], base_offset=0, timestamp_ms=1000)
    with_headers = bytearray(
        encode_batch(
            [ProducerRecord(b"h", b"x", [("trace", b"1")], 2000), ProducerRecord(None, b"y", (), 2001)],
            base_offset=9,
        )
    )
    return b"".join(
        [
            plain,
            _txn_batch(COMMITTED_PID, 3, 2),
            _txn_batch(ABORTED_PID, 5, 2),
            build_control_batch(
                COMMITTED_PID, 0, commit=True, coordinator_epoch=0, timestamp_ms=1, base_offset=7
            ),
            build_control_batch(
                ABORTED_PID, 0, commit=False, coordinator_epoch=0, timestamp_ms=1, base_offset=8
            ),
            bytes(with_headers),
            plain[:20],
        ]
    )


@pytest.mark.parametrize(
    ("isolation_level", "position", "until"), [(1, 0, 100), (0, 0, 100), (1, 1, 10), (0, 4, 6)]
)
def test_fetch_to_arrow_matches_the_client_filter(isolation_level, position, until):
    data = _fetch()
    aborted = [(ABORTED_PID, 5)]
    batch, next_position = fetch_to_arrow(
        "t",
        3,
        data,
        position=position,
        until=until,
        isolation_level=isolation_level,
        aborted_transactions=aborted,
    )
    expected = [
        r
        for r in filter_batches(
            decode_batches(data),
            fetch_offset=position,
            isolation_level=isolation_level,
            aborted_transactions=aborted,
        )
        if r.offset < until
    ]
    assert next_position == 11
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [r.offset for r in expected]
    assert [r["key"] for r in rows] == [r.key for r in expected]
    assert [r["value"] for r in rows] == [r.value for r in expected]
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        list(r.headers) for r in expected
    ]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [r.timestamp for r in expected]
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {3}


def test_read_committed_drops_the_aborted_transaction():
    batch, _ = fetch_to_arrow(
        "t", 0, _fetch(), position=0, until=100, isolation_level=1, aborted_transactions=[(ABORTED_PID, 5)]
    )
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3, 4, 9, 10]


def test_nothing_visible_gives_no_batch_but_progress():
    data = _txn_batch(ABORTED_PID, 0, 3)
    batch, next_position = fetch_to_arrow(
        "t", 0, data, position=0, until=3, isolation_level=1, aborted_transactions=[(ABORTED_PID, 0)]
    )
    assert batch is None and next_position == 3
    assert fetch_to_arrow("t", 0, b"", position=4, until=9, isolation_level=1) == (None, 4)


def test_timestamps_scale_to_microseconds():
    data = encode_batch([(b"k", b"v")], timestamp_ms=1_700_000_000_123)
    batch, _ = fetch_to_arrow("t", 0, data, position=0, until=1, isolation_level=0)
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000]


def test_a_compacted_fetch_with_gaps_and_an_empty_batch():
    """What the log cleaner leaves: a batch that lost records (its offset range unchanged), a gap, and a
    producer's emptied last batch. Reads go on after each batch's last offset, never stall on a gap."""
    full = encode_batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], base_offset=10, timestamp_ms=1000)
    [(header, view)] = list(split_batches(full))
    kept = rebuild_batch(header, decode_record_objects(header, view)[1:2])  # only offset 11 is left
    emptied = _txn_batch(COMMITTED_PID, 20, 2)
    [(empty_header, empty_view)] = list(split_batches(emptied))
    data = kept + rebuild_batch(empty_header, [])
    batch, next_position = fetch_to_arrow("t", 0, data, position=10, until=30, isolation_level=1)
    assert batch.column("offset").to_pylist() == [11]
    assert next_position == 22  # past the empty batch's last offset
    # A read from inside the batch's removed tail moves past it: the batch still ends at offset 12.
    assert fetch_to_arrow("t", 0, kept, position=12, until=15, isolation_level=0) == (None, 13)
