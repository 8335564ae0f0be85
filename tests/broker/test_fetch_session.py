"""The fetch session cache and contexts (KIP-227), without sockets: Kafka's FetchManager/FetchSession rules."""

from __future__ import annotations

import random
import uuid

from kafka.protocol.consumer import FetchResponse

from onceflow.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionRequest,
    SessionErrorContext,
    SessionlessContext,
    SessionRequest,
    next_epoch,
)
from onceflow.protocol.errors import ErrorCode

_AbortedTxn = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)
EVICTION_MS = 1000


def data(hw=10, lso=10, start=0, records=b"", error=0, aborted=None, index=0):
    """A Fetch response PartitionData as the handler builds it."""
    return FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=start,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )


def req(offset=0, max_bytes=1 << 20):
    return PartitionRequest(offset, max_bytes)


def request(session_id=0, epoch=INITIAL_EPOCH, partitions=None, forgotten=(), *, ids=False, privileged=False):
    return SessionRequest(session_id, epoch, ids, privileged, dict(partitions or {}), list(forgotten))


def new_cache(slots=1000, eviction_ms=EVICTION_MS):
    return FetchSessionCache(slots, eviction_ms, rng=random.Random(7))


def open_session(cache, partitions, now=0, **kwargs):
    """A full fetch at epoch 0 answered with ``data()`` for each partition: the new session's id."""
    context = cache.new_context(request(partitions=partitions, **kwargs), now)
    assert isinstance(context, FullFetchContext)
    answer = context.respond([(key, data()) for key, _ in context.partitions], now)
    assert answer.session_id != INVALID_SESSION_ID
    return answer.session_id


def incremental(cache, session_id, epoch, partitions=None, forgotten=(), now=0):
    return cache.new_context(request(session_id, epoch, partitions, forgotten), now)


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1  # never 0, which would mean "full fetch"
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_at_epoch_zero_creates_a_session_with_every_partition():
    cache = new_cache()
    context = cache.new_context(request(partitions={A0: req(5), B0: req(7)}), now_ms=0)
    assert isinstance(context, FullFetchContext)
    assert context.partitions == [(A0, req(5)), (B0, req(7))]
    results = [(A0, data(hw=9, records=b"x")), (B0, data(hw=7))]
    answer = context.respond(results, now_ms=0)
    assert answer.error_code == ErrorCode.NONE
    assert answer.partitions == results  # a full answer lists every partition, changed or not
    session = cache.get(answer.session_id)
    assert session is not None and session.epoch == 1  # the client's next request carries epoch 1
    assert list(session.partitions) == [A0, B0]
    assert session.partitions[A0].request == req(5)
    assert session.partitions[A0].high_watermark == 9
    assert (len(cache), cache.total_partitions, cache.stats.sessions_created) == (1, 2, 1)


def test_final_epoch_is_sessionless_and_closes_the_named_session():
    cache = new_cache()
    session_id = open_session(cache, {A0: req()})
    context = cache.new_context(request(session_id, FINAL_EPOCH, {A0: req()}), 0)
    assert isinstance(context, SessionlessContext)
    answer = context.respond([(A0, data())], 0)
    assert (answer.session_id, answer.partitions) == (INVALID_SESSION_ID, [(A0, data())])
    assert cache.get(session_id) is None and len(cache) == 0 and cache.total_partitions == 0


def test_full_fetch_naming_a_session_replaces_it():
    cache = new_cache()
    first = open_session(cache, {A0: req()})
    second = open_session(cache, {B0: req()}, session_id=first)
    assert second != first
    assert cache.get(first) is None
    assert list(cache.get(second).partitions) == [B0]


def test_no_slots_means_no_session_but_a_full_answer():
    cache = new_cache(slots=0)
    context = cache.new_context(request(partitions={A0: req()}), 0)
    answer = context.respond([(A0, data())], 0)
    assert (answer.error_code, answer.session_id, answer.partitions) == (ErrorCode.NONE, 0, [(A0, data())])
    assert len(cache) == 0


def test_session_errors():
    cache = new_cache()
    session_id = open_session(cache, {A0: req()})
    cases = [
        (request(session_id + 1, 1, {A0: req()}), ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (request(0, 1, {A0: req()}), ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (request(session_id, 2, {A0: req()}), ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (request(session_id, -5, {A0: req()}), ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (request(session_id, 1, {A0: req()}, ids=True), ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR),
    ]
    for session_request, error in cases:
        context = cache.new_context(session_request, 0)
        assert isinstance(context, SessionErrorContext)
        assert (context.error, context.partitions) == (error, [])
        assert context.respond([], 0) == (error, INVALID_SESSION_ID, [])
    # None of them touched the session: the right epoch still works.
    assert cache.get(session_id).epoch == 1
    assert isinstance(incremental(cache, session_id, 1), IncrementalFetchContext)
    assert cache.stats.session_errors == len(cases)


def test_a_session_made_by_v13_needs_topic_ids_and_the_reverse():
    cache = new_cache()
    topic_id = uuid.uuid4()
    session_id = open_session(cache, {(topic_id, 0): req()}, ids=True)
    context = cache.new_context(request(session_id, 1, {}, ids=False), 0)
    assert context.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    context = cache.new_context(request(session_id, 1, {}, ids=True), 0)
    assert isinstance(context, IncrementalFetchContext)
    assert [key for key, _ in context.partitions] == [(topic_id, 0)]


def test_incremental_fetch_adds_updates_forgets_and_reads_the_whole_session():
    cache = new_cache()
    session_id = open_session(cache, {A0: req(1), A1: req(2)})
    context = incremental(cache, session_id, 1, {A1: req(5), B0: req(0)}, forgotten=[A0, ("zz", 9)])
    assert isinstance(context, IncrementalFetchContext)
    assert context.partitions == [(A1, req(5)), (B0, req(0))]  # implied partitions are read too
    session = cache.get(session_id)
    assert session.epoch == 2 and cache.total_partitions == 2
    # A partition in the session that the request does not name keeps its last request data.
    context = incremental(cache, session_id, 2, {})
    assert context.partitions == [(A1, req(5)), (B0, req(0))]


def test_incremental_answer_lists_only_partitions_with_something_to_say():
    cache = new_cache()
    keys = [("t", p) for p in range(8)]
    session_id = open_session(cache, {k: req() for k in keys})  # all cached as data(): hw 10, lso 10, start 0
    context = incremental(cache, session_id, 1)
    aborted = [_AbortedTxn(producer_id=3, first_offset=4)]
    results = [
        (keys[0], data()),  # nothing new
        (keys[1], data(records=b"batch")),
        (keys[2], data(hw=11)),
        (keys[3], data(lso=8)),  # beyond Kafka's rule: a new last stable offset is listed too
        (keys[4], data(start=3)),
        (keys[5], data(hw=-1, lso=-1, start=-1, error=ErrorCode.OFFSET_OUT_OF_RANGE)),
        (keys[6], data(aborted=aborted)),
        (keys[7], data(aborted=[])),  # read_committed with no aborted transactions: nothing to say
    ]
    answer = context.respond(results, 0)
    assert answer.error_code == ErrorCode.NONE and answer.session_id == session_id
    assert [key for key, _ in answer.partitions] == keys[1:7]
    assert answer.partitions[0][1] is results[1][1]  # the data itself, unchanged

    # What was listed is now what the fetcher knows: the same values again say nothing...
    context = incremental(cache, session_id, 2)
    again = [
        (keys[2], data(hw=11)),
        (keys[3], data(lso=8)),
        (keys[4], data(start=3)),
        (keys[5], data(hw=-1, lso=-1, start=-1, error=ErrorCode.OFFSET_OUT_OF_RANGE)),
    ]
    # ...except an error, which is listed every time.
    assert [key for key, _ in context.respond(again, 0).partitions] == [keys[5]]
    # Once the error is gone the partition is listed again, even with the same offsets as before it.
    context = incremental(cache, session_id, 3)
    assert [key for key, _ in context.respond([(keys[5], data())], 0).partitions] == [keys[5]]


def test_partitions_that_returned_records_move_to_the_end_of_the_session():
    cache = new_cache()
    session_id = open_session(cache, {A0: req(), A1: req(), B0: req()})
    context = incremental(cache, session_id, 1)
    context.respond([(A0, data(records=b"r")), (A1, data(hw=12)), (B0, data())], 0)
    # A1 was listed (new high watermark) but brought no records: it keeps its place.
    assert [key for key, _ in incremental(cache, session_id, 2).partitions] == [A1, B0, A0]


def test_a_duplicate_request_is_refused_and_the_stale_context_cannot_answer():
    cache = new_cache()
    session_id = open_session(cache, {A0: req()})
    first = incremental(cache, session_id, 1)  # e.g. a long poll, still waiting
    assert incremental(cache, session_id, 1).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # a resend
    second = incremental(cache, session_id, 2)  # the client gave up on the first and went on
    answer = first.respond([(A0, data(records=b"r"))], 0)
    assert (answer.error_code, answer.session_id, answer.partitions) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        session_id,
        [],
    )
    assert second.respond([(A0, data(records=b"r"))], 0).error_code == ErrorCode.NONE


def test_forgetting_every_partition_closes_the_session():
    cache = new_cache()
    session_id = open_session(cache, {A0: req(), A1: req()})
    context = incremental(cache, session_id, 1, {}, forgotten=[A0, A1])
    assert isinstance(context, SessionlessContext) and context.partitions == []
    assert context.respond([], 0) == (ErrorCode.NONE, INVALID_SESSION_ID, [])
    assert cache.get(session_id) is None and cache.total_partitions == 0


def test_epoch_wraps_after_max_epoch():
    cache = new_cache()
    session_id = open_session(cache, {A0: req()})
    epoch = 1
    for _ in range(3):
        incremental(cache, session_id, epoch)
        epoch = next_epoch(epoch)
    session = cache.get(session_id)
    session.epoch = MAX_EPOCH  # a test shortcut for 2^31 fetches
    assert isinstance(incremental(cache, session_id, MAX_EPOCH), IncrementalFetchContext)
    assert session.epoch == 1
    assert isinstance(incremental(cache, session_id, 1), IncrementalFetchContext)


def test_session_ids_are_positive_and_unique():
    cache = FetchSessionCache(1000, EVICTION_MS, rng=random.Random(1))
    ids = {open_session(cache, {A0: req()}) for _ in range(300)}
    assert len(ids) == 300 and all(0 < i < 2**31 - 1 for i in ids)


# -- eviction (Kafka's FetchSessionCache.tryEvict) ----------------------------------------------------


def fill(cache, sizes, now, privileged=False):
    return [
        open_session(cache, {("t", p): req() for p in range(size)}, now=now, privileged=privileged)
        for size in sizes
    ]


def try_open(cache, size, now, privileged=False):
    context = cache.new_context(
        request(partitions={("n", p): req() for p in range(size)}, privileged=privileged), now
    )
    return context.respond([(key, data()) for key, _ in context.partitions], now).session_id


def test_a_full_cache_evicts_the_least_recently_used_session_once_it_is_stale():
    cache = new_cache(slots=2)
    old, recent = fill(cache, [5, 5], now=0)
    incremental(cache, recent, 1, now=600)  # used again; ``old`` was last used at 0
    assert try_open(cache, 1, now=EVICTION_MS) == INVALID_SESSION_ID  # idle exactly the eviction time
    new = try_open(cache, 1, now=EVICTION_MS + 1)  # idle longer: stale, evicted whatever its size
    assert new != INVALID_SESSION_ID
    assert cache.get(old) is None and cache.get(recent) is not None
    assert cache.stats.evictions == 1


def test_young_sessions_are_not_evicted_for_a_bigger_one():
    cache = new_cache(slots=1)
    fill(cache, [1], now=0)
    assert try_open(cache, 50, now=10) == INVALID_SESSION_ID


def test_an_established_smaller_session_gives_way_to_a_bigger_one():
    cache = new_cache(slots=2)
    small, big = fill(cache, [2, 9], now=0)
    # Both used after the eviction time has passed since their creation: now evictable by size.
    incremental(cache, small, 1, now=EVICTION_MS + 1)
    incremental(cache, big, 1, now=EVICTION_MS + 1)
    assert try_open(cache, 1, now=EVICTION_MS + 2) == INVALID_SESSION_ID  # smaller than both
    assert try_open(cache, 2, now=EVICTION_MS + 2) == INVALID_SESSION_ID  # a tie keeps the old one
    new = try_open(cache, 3, now=EVICTION_MS + 2)
    assert new != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(big) is not None  # the smallest went


def test_followers_sessions_are_privileged():
    cache = new_cache(slots=1)
    (consumer,) = fill(cache, [20], now=0)
    # A follower's session evicts a young consumer session of any size...
    follower = try_open(cache, 1, now=1, privileged=True)
    assert follower != INVALID_SESSION_ID and cache.get(consumer) is None
    # ...and consumers cannot evict it, however big, until it is old and not used for a while.
    assert try_open(cache, 100, now=2) == INVALID_SESSION_ID
    incremental(cache, follower, 1, now=EVICTION_MS + 2)  # used more than EVICTION_MS after creation
    assert try_open(cache, 100, now=EVICTION_MS + 3) == INVALID_SESSION_ID  # unprivileged < privileged
    assert try_open(cache, 2, now=EVICTION_MS + 3, privileged=True) != INVALID_SESSION_ID
