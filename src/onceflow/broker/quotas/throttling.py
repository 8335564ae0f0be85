"""Answering a request within its client's quotas, as Kafka's broker does (KIP-13, KIP-124, KIP-219).

A request over quota is never refused. It is handled as usual; its answer carries the throttle time
(``throttle_time_ms``, the largest of the quotas it went over), goes out at once, and the connection
is then muted for that long (``client_protocol.ThrottledAnswer``): nothing more is read from it or
started, while a KIP-219 client waits the same time on its side.

What is recorded, per (user, client-id) as ``ClientQuotas`` groups them:

- ``producer_byte_rate``: a Produce request's size (also for acks=0, which gets no answer but is
  muted all the same);
- ``consumer_byte_rate``: a Fetch answer's size. Kafka answers a throttled fetch with no records and
  un-records its size; onceflow sends the records with the throttle time, so the client's next fetch
  simply waits. The rate comes out the same; the bytes are not fetched twice;
- ``request_percentage``: the time the broker spent running the request's handler (each step between
  its suspensions, so a long-polling Fetch is charged for its work, not its wait), as percent of one
  thread over the window; not for acks=0 produce, as in Kafka. Encoding the answer is not counted.

Only this path pays for quotas: the broker takes it once any quota exists.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Coroutine
from typing import Any

from onceflow.broker.client_protocol import Answer, ThrottledAnswer
from onceflow.broker.connection import RequestReceived
from onceflow.broker.context import RequestContext
from onceflow.broker.limit_events import FETCH_THROTTLED, PRODUCE_THROTTLED, REQUEST_THROTTLED, LimitEvents
from onceflow.broker.quotas.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from onceflow.broker.quotas.manager import ClientQuotas
from onceflow.protocol import apis

PRODUCE_KEY = 0
FETCH_KEY = 1
_FIRST_FLEXIBLE_FETCH_VERSION = 12
_INT32 = struct.Struct(">i")
_NS_TO_PERCENT_SECONDS = 100 / 1e9


class _TimedSteps:
    """Awaits a coroutine, adding up the time spent inside each of its steps (not while suspended)."""

    __slots__ = ("_coro", "ns")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.ns = 0

    def __await__(self) -> _TimedSteps:
        return self

    def __iter__(self) -> _TimedSteps:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self._coro.send(value)
        finally:
            self.ns += time.perf_counter_ns() - start

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        start = time.perf_counter_ns()
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)
        finally:
            self.ns += time.perf_counter_ns() - start

    def close(self) -> None:
        self._coro.close()


async def answer_within_quotas(
    handler: Any, ctx: RequestContext, event: RequestReceived, quotas: ClientQuotas, events: LimitEvents
) -> Answer:
    """Handle the request, then record it against its client's quotas; the answer, throttled if over."""
    header = event.header
    request_quota = quotas.enabled(REQUEST_PERCENTAGE)
    if request_quota:
        timed = _TimedSteps(handler.handle(ctx, event.request))
        response = await timed
    else:
        response = await handler.handle(ctx, event.request)
    now_ms = int(time.monotonic() * 1000)
    user, client_id = ctx.session.principal.name, header.client_id or ""
    throttle_ms, kind = 0, ""
    if header.api_key == PRODUCE_KEY:
        throttle_ms = quotas.record(PRODUCER_BYTE_RATE, user, client_id, event.size, now_ms)
        kind = PRODUCE_THROTTLED
    if request_quota and not (header.api_key == PRODUCE_KEY and event.request.acks == 0):
        spent = timed.ns * _NS_TO_PERCENT_SECONDS
        request_ms = quotas.record(REQUEST_PERCENTAGE, user, client_id, spent, now_ms)
        if request_ms > throttle_ms:
            throttle_ms, kind = request_ms, REQUEST_THROTTLED
    frame = None
    if response is not None:
        if throttle_ms and getattr(response, "throttle_time_ms", None) is not None:
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
        frame = apis.encode_response(response, header.correlation_id, header.api_version)
        if header.api_key == FETCH_KEY:
            fetch_ms = quotas.record(CONSUMER_BYTE_RATE, user, client_id, len(frame), now_ms)
            if fetch_ms > throttle_ms:
                throttle_ms, kind = fetch_ms, FETCH_THROTTLED
                if header.api_version >= 1:  # throttle_time_ms is the body's first field
                    flexible = header.api_version >= _FIRST_FLEXIBLE_FETCH_VERSION
                    _INT32.pack_into(frame, 8 + (1 if flexible else 0), throttle_ms)
    if not throttle_ms:
        return frame
    events.record(
        kind,
        "client-id %r (user %s) is over its quota: answers carry a throttle time (%d ms now) and its "
        "connection is muted as long",
        client_id,
        user,
        throttle_ms,
    )
    return ThrottledAnswer(frame, throttle_ms)
