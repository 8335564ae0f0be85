"""RequestMetrics without sockets: where a request's time goes (a timed coroutine on a fake clock),
requests per version, and error codes counted from answers as Kafka's ``errorCounts`` does."""

from __future__ import annotations

import asyncio
import types

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from onceflow.broker.client_protocol import ThrottledAnswer
from onceflow.broker.metrics.error_codes import error_counter
from onceflow.broker.metrics.families import Families
from onceflow.broker.metrics.request_stats import RequestStats
from onceflow.protocol.errors import ErrorCode


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Wait:
    """An awaitable that suspends its coroutine once (as a long poll waiting for data)."""

    def __await__(self):
        yield "waiting"


def drive(coro, clock: Clock, remote_s: float):
    """Run ``coro`` to its end by hand, ``remote_s`` passing while it is suspended; its result."""
    coro.send(None)
    clock.t += remote_s
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine did not finish")


def ms(histogram) -> float:
    return histogram.sum


def test_a_suspending_request_splits_into_queue_local_remote_and_send():
    clock = Clock(100.002)  # read at 100.000: 2 ms queued
    stats = RequestStats(clock=clock)
    frame = bytearray(b"answer")

    async def handler():
        clock.t += 0.003  # 3 ms of work
        await Wait()
        clock.t += 0.001  # 1 more ms of work once woken
        return frame

    answers: dict = {}
    result = drive(stats.timed(handler(), 1, 12, 100.0, answers), clock, remote_s=0.1)
    assert result is frame and list(answers) == [id(frame)]
    fetch = stats.apis[1]
    assert fetch.requests == {12: 1}
    assert round(ms(fetch.queue), 6) == 2.0
    assert round(ms(fetch.local), 6) == 4.0
    assert round(ms(fetch.remote), 6) == 100.0
    stats.written(answers.pop(id(frame)), clock.t + 0.0005, clock.t + 0.0006)
    assert round(ms(fetch.response_queue), 6) == 0.5 and round(ms(fetch.response_send), 6) == 0.1
    assert round(ms(fetch.total), 6) == round(2 + 4 + 100 + 0.6, 6)


def test_an_answer_that_writes_nothing_is_done_with_its_handler_and_a_throttle_is_recorded():
    clock = Clock(5.0)
    stats = RequestStats(clock=clock)

    async def nothing():
        return None

    async def throttled():
        return ThrottledAnswer(None, 250)

    for coro in (nothing(), throttled()):
        try:
            stats.timed(coro, 0, 9, 5.0, {}).send(None)
        except StopIteration:
            pass
    produce = stats.apis[0]
    assert produce.requests == {9: 2} and produce.total.count == 2 and produce.response_send.count == 2
    assert produce.throttle.sum == 250 and produce.throttle.count == 2


def test_a_failing_handler_still_counts_its_request():
    stats = RequestStats(clock=Clock(1.0))

    async def broken():
        raise RuntimeError("a handler bug")

    try:
        stats.timed(broken(), 3, 12, 1.0, {}).send(None)
    except RuntimeError:
        pass
    assert stats.apis[3].requests == {12: 1} and stats.apis[3].total.count == 1


def _produce_response(*codes: int):
    P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    parts = [
        P(index=i, error_code=c, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
        for i, c in enumerate(codes)
    ]
    return ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=parts)],
        throttle_time_ms=0,
    )


def test_error_codes_are_counted_per_field_as_kafka_does():
    counts: dict[int, int] = {}
    error_counter(ProduceResponse, 9)(_produce_response(0, 0, ErrorCode.NOT_ENOUGH_REPLICAS), counts)
    assert counts == {0: 2, ErrorCode.NOT_ENOUGH_REPLICAS: 1}

    D = FetchResponse.FetchableTopicResponse.PartitionData
    fetch = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(topic="t", partitions=[D(partition_index=0, error_code=1)])
        ],
    )
    counts = {}
    error_counter(FetchResponse, 12)(fetch, counts)
    assert counts == {0: 1, ErrorCode.OFFSET_OUT_OF_RANGE: 1}  # the top-level code and the partition's
    counts = {}
    error_counter(FetchResponse, 6)(fetch, counts)  # v6 has no top-level error code
    assert counts == {ErrorCode.OFFSET_OUT_OF_RANGE: 1}

    T = MetadataResponse.MetadataResponseTopic
    metadata = MetadataResponse(topics=[T(error_code=3, name="gone", partitions=[])], brokers=[])
    counts = {}
    error_counter(MetadataResponse, 12)(metadata, counts)
    assert counts == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 1}


def test_instrumented_handlers_count_their_answers_error_codes():
    stats = RequestStats()
    module = types.SimpleNamespace(
        API_KEY=0, MIN_VERSION=3, MAX_VERSION=12, REQUEST=object, FIRST_SUPPORTED_VERSION=3
    )

    async def handle(ctx, request):
        return _produce_response(0, ErrorCode.CORRUPT_MESSAGE)

    module.handle = handle
    handler = stats.instrument({0: module})[0]
    assert (handler.API_KEY, handler.MAX_VERSION, handler.FIRST_SUPPORTED_VERSION) == (0, 12, 3)
    ctx = types.SimpleNamespace(api_version=9)
    asyncio.run(handler.handle(ctx, None))
    asyncio.run(handler.handle(ctx, None))
    assert stats.apis[0].errors == {0: 2, ErrorCode.CORRUPT_MESSAGE: 2}
    families = Families()
    stats.collect(families)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert (
        samples[
            (
                "kafka_network_requestmetrics_errors_total",
                (("error", "CORRUPT_MESSAGE"), ("request", "Produce")),
            )
        ]
        == 2
    )


def test_fetch_is_also_reported_as_fetch_follower_or_fetch_consumer():
    """Kafka names a follower's Fetch (replica id >= 0) FetchFollower and a consumer's FetchConsumer,
    besides Fetch: the real Fetch handler says which, from the request."""
    from kafka.protocol.consumer import FetchRequest

    from onceflow.broker.handlers import fetch as fetch_handler

    clock = Clock(1.0)
    stats = RequestStats(clock=clock)
    module = types.SimpleNamespace(
        API_KEY=1,
        MIN_VERSION=4,
        MAX_VERSION=17,
        REQUEST=FetchRequest,
        is_from_follower=fetch_handler.is_from_follower,
    )

    async def handle(ctx, request):
        await Wait()  # a long poll: the kind is known before the handler suspends
        return None

    module.handle = handle
    handler = stats.instrument({1: module})[1]
    ctx = types.SimpleNamespace(api_version=12)
    for replica_id, answers in ((2, {}), (3, {}), (-1, {}), (-2, {})):
        request = types.SimpleNamespace(replica_id=replica_id)
        drive(stats.timed(handler.handle(ctx, request), 1, 12, 1.0, answers), clock, 0.5)
    families = Families()
    stats.collect(families)
    requests = {
        tuple(sorted(s.labels.items())): s.value
        for f in families
        for s in f.samples
        if s.name == "kafka_network_requestmetrics_requests_total"
    }
    assert requests == {
        (("request", "Fetch"), ("version", "12")): 4,
        (("request", "FetchFollower"), ("version", "12")): 2,
        (("request", "FetchConsumer"), ("version", "12")): 2,  # -2: Kafka's debug consumer
    }
    remote = {
        s.labels["request"]: s.value
        for f in families
        for s in f.samples
        if s.name == "kafka_network_requestmetrics_remotetimems_count"
    }
    assert remote == {"Fetch": 4, "FetchFollower": 2, "FetchConsumer": 2}


def test_fetch_is_also_reported_as_fetch_consumer():
    clock = Clock(1.0)
    stats = RequestStats(clock=clock)

    async def fetch():
        return None

    try:
        stats.timed(fetch(), 1, 12, 1.0, {}).send(None)
    except StopIteration:
        pass
    families = Families()
    stats.collect(families)
    requests = {
        tuple(sorted(s.labels.items())): s.value
        for f in families
        for s in f.samples
        if s.name == "kafka_network_requestmetrics_requests_total"
    }
    assert requests == {
        (("request", "Fetch"), ("version", "12")): 1,
        (("request", "FetchConsumer"), ("version", "12")): 1,
    }
