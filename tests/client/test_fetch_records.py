"""read_committed filtering of fetched data, as Kafka's consumer does it (pure, no broker)."""

from onceflow.client.fetch_records import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Marker,
    records_and_markers,
    visible_records,
)
from onceflow.protocol.record_codec import encode_batch
from onceflow.protocol.records import build_control_batch

TS = 1_700_000_000_000


def txn_batch(pid, base_offset, values, seq=0):
    return encode_batch(
        [(None, v) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
        base_offset=base_offset,
        timestamp_ms=TS,
    )


def marker(pid, offset, commit):
    return build_control_batch(
        pid, 0, commit=commit, coordinator_epoch=0, timestamp_ms=TS, base_offset=offset
    )


# Offsets: 0-1 pid 1 (aborted), 2-3 pid 2 (committed), 4 abort marker pid 1, 5 commit marker pid 2,
# 6 plain record, 7 pid 1 again in a new transaction (committed), 8 its commit marker.
LOG = (
    txn_batch(1, 0, [b"a1", b"a2"])
    + txn_batch(2, 2, [b"c1", b"c2"])
    + marker(1, 4, commit=False)
    + marker(2, 5, commit=True)
    + encode_batch([(None, b"plain")], base_offset=6, timestamp_ms=TS)
    + txn_batch(1, 7, [b"c3"], seq=2)
    + marker(1, 8, commit=True)
)
ABORTED = [(1, 0)]


def values(records):
    return [r.value for r in records]


def test_read_committed_drops_aborted_transactions_and_markers():
    records, next_offset = visible_records(
        LOG, fetch_offset=0, isolation_level=READ_COMMITTED, aborted_transactions=ABORTED
    )
    assert values(records) == [b"c1", b"c2", b"plain", b"c3"]
    assert next_offset == 9


def test_read_uncommitted_shows_everything_but_markers():
    records, next_offset = visible_records(LOG, fetch_offset=0, isolation_level=READ_UNCOMMITTED)
    assert values(records) == [b"a1", b"a2", b"c1", b"c2", b"plain", b"c3"]
    assert [r.offset for r in records] == [0, 1, 2, 3, 6, 7]
    assert next_offset == 9


def _browsed(entries):
    return [
        ("COMMIT" if e.commit else "ABORT", e.producer_id) if isinstance(e, Marker) else e.record.value
        for e in entries
    ]


def test_a_browser_sees_the_markers_and_read_committed_still_hides_aborted_records():
    entries, next_offset, hidden = records_and_markers(
        LOG, fetch_offset=0, isolation_level=READ_COMMITTED, aborted_transactions=ABORTED
    )
    assert _browsed(entries) == [b"c1", b"c2", ("ABORT", 1), ("COMMIT", 2), b"plain", b"c3", ("COMMIT", 1)]
    assert [e.offset for e in entries] == [2, 3, 4, 5, 6, 7, 8]
    assert hidden == 2 and next_offset == 9
    entries, _next, hidden = records_and_markers(LOG, fetch_offset=3, isolation_level=READ_UNCOMMITTED)
    assert _browsed(entries)[:3] == [b"c2", ("ABORT", 1), ("COMMIT", 2)] and hidden == 0
    assert entries[0].transactional and entries[0].producer_id == 2
    # From offset 5 the abort marker of pid 1 (offset 4) is behind us, yet it still ends pid 1's
    # aborted run: its next transaction (offset 7, committed) shows.
    entries, _next, hidden = records_and_markers(
        LOG, fetch_offset=5, isolation_level=READ_COMMITTED, aborted_transactions=ABORTED
    )
    assert _browsed(entries) == [("COMMIT", 2), b"plain", b"c3", ("COMMIT", 1)] and hidden == 0


def test_records_before_the_fetch_offset_are_skipped():
    records, _ = visible_records(
        LOG, fetch_offset=3, isolation_level=READ_COMMITTED, aborted_transactions=ABORTED
    )
    assert values(records) == [b"c2", b"plain", b"c3"]


def test_only_markers_still_advance_the_position():
    records, next_offset = visible_records(marker(1, 10, commit=True), fetch_offset=10)
    assert records == []
    assert next_offset == 11


def test_empty_fetch_keeps_the_position():
    assert visible_records(None, fetch_offset=5) == ([], 5)
    assert visible_records(b"", fetch_offset=5) == ([], 5)


def fields(records):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def test_the_fetchers_fast_decode_matches_the_reference_filter():
    """The consumer's decode (headers-first filtering, the reader's own record objects) shows the
    same records, field for field, as the Record-based filter, for both isolation levels."""
    from onceflow.client.consumer.fetcher import decode_visible

    with_headers = encode_batch(
        [(b"k", b"h", [("n", b"v"), ("none", None)], TS + 1)], base_offset=9, timestamp_ms=TS
    )
    data = LOG + with_headers
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        for fetch_offset in (0, 3, 7, 9):
            reference, _ = visible_records(
                data, fetch_offset=fetch_offset, isolation_level=isolation, aborted_transactions=ABORTED
            )
            fast = decode_visible(data, fetch_offset, isolation, ABORTED)
            assert fields(fast) == fields(reference)
            assert fields(fast)  # every case leaves something to compare
    assert fields(decode_visible(with_headers, 0, READ_UNCOMMITTED, [])) == [
        (9, TS + 1, b"k", b"h", [("n", b"v"), ("none", None)])
    ]
