"""RequestMetrics: requests and errors per API, and where each request's time went, as Kafka's
``kafka.network:type=RequestMetrics`` beans.

Two small pieces on the request path, both only when metrics are on:

- :meth:`RequestStats.instrument` wraps each handler so that its response's error codes are counted
  (``ErrorsPerSec``: every ``ErrorCode`` field of the answer, ``NONE`` included, as Kafka counts them).
  Wrapping the handlers, not the dispatch, also covers answers made through the client-quota path.
- :meth:`RequestStats.timed` wraps the request's coroutine where the connection starts it
  (``client_protocol``), and :meth:`RequestStats.written` is told when its answer is written. Between
  them, Kafka's times (in ms, as histograms):

  ======================  ===================================================================
  RequestQueueTimeMs      read off the socket -> its handler starts (requests of one read run
                          one after the other; a connection holding back reads them later)
  LocalTimeMs             the handler's own running time (the sum of its steps)
  RemoteTimeMs            time the handler waited: a long-polling Fetch for data, a transactional
                          Produce for its coordinator
  ThrottleTimeMs          the throttle time its answer carried (client quotas)
  ResponseQueueTimeMs     answer made -> handed to the socket (behind earlier answers: answers
                          leave in request order; or while the client does not read)
  ResponseSendTimeMs      handing the answer to the socket (the event loop writes what the kernel
                          does not take at once later, unmeasured)
  TotalTimeMs             read off the socket -> answer handed to the socket
  ======================  ===================================================================

  and ``RequestsPerSec`` per API and version, counted when the request is done (Kafka counts it when
  its answer has gone). A request that gets no answer (acks=0) is done when its handler is.

Fetch requests also count under ``FetchFollower`` (a follower's, replica id >= 0) or ``FetchConsumer``
(a consumer's), as Kafka reports Fetch both as itself and under one of these names: the Fetch
handler's wrapper tells the running request which (see :meth:`_CountingHandler.handle`).
"""

from __future__ import annotations

import collections.abc
import time
from bisect import bisect_left
from typing import Any

from onceflow.broker.client_protocol import ThrottledAnswer
from onceflow.broker.metrics.error_codes import Counter, error_counter
from onceflow.broker.metrics.families import Families, jmx
from onceflow.broker.metrics.histogram import BUCKETS_MS, Histogram
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode

FETCH_KEY = 1

# (attribute, MBean name, meaning): the histograms of every API.
TIMES = (
    ("queue", "RequestQueueTimeMs", "Request read -> its handler started, in ms."),
    ("local", "LocalTimeMs", "Time the handler spent running, in ms."),
    ("remote", "RemoteTimeMs", "Time the handler waited (long poll, coordinator), in ms."),
    ("throttle", "ThrottleTimeMs", "Throttle time of the answer (client quotas), in ms."),
    ("response_queue", "ResponseQueueTimeMs", "Answer made -> handed to the socket, in ms."),
    ("response_send", "ResponseSendTimeMs", "Handing the answer to the socket, in ms."),
    ("total", "TotalTimeMs", "Request read -> answer handed to the socket, in ms."),
)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``): ``Produce``, ``Fetch``, ``EndTxn``, ..."""
    cls = apis.REQUEST_CLASSES.get(api_key)
    if cls is None:
        return str(api_key)
    name = cls.name
    return name[: -len("Request")] if name.endswith("Request") else name


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ApiStats:
    """The counts and histograms of one API (or of one kind of Fetch: ``name`` given)."""

    __slots__ = ("api_key", "name", "requests", "errors", *(t for t, _, _ in TIMES))

    def __init__(self, api_key: int, name: str | None = None) -> None:
        self.api_key = api_key
        self.name = name or api_name(api_key)
        self.requests: dict[int, int] = {}  # version -> requests done
        self.errors: dict[int, int] = {}  # error code -> occurrences in answers
        for attr, _, _ in TIMES:
            setattr(self, attr, Histogram())


class RequestStats:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.apis: dict[int, ApiStats] = {}
        # Fetch counted again by who fetched: False a consumer, True a follower.
        self.fetch_kinds = {
            False: ApiStats(FETCH_KEY, "FetchConsumer"),
            True: ApiStats(FETCH_KEY, "FetchFollower"),
        }
        self._clock = clock

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats(api_key)
        return stats

    # -- the request path ----------------------------------------------------------------------------

    def instrument(self, handlers: dict[int, Any]) -> dict[int, Any]:
        """The broker's handler table with each handler counting its answers' error codes."""
        return {
            key: _CountingHandler(handler, self.api(key), self.fetch_kinds if key == FETCH_KEY else None)
            for key, handler in handlers.items()
        }

    def timed(
        self, coro: collections.abc.Coroutine, api_key: int, version: int, read_at: float, answers: dict
    ) -> collections.abc.Coroutine:
        """``coro`` (a request's dispatch), timed. ``read_at``: when its bytes were read (the clock of
        this object, ``time.monotonic``); ``answers``: the connection's table of answers made and not
        yet written, which :meth:`written` takes them from."""
        kind = self.fetch_kinds[False] if api_key == FETCH_KEY else None  # until the handler says
        return _TimedRequest(coro, self.api(api_key), kind, version, read_at, answers, self._clock)

    @staticmethod
    def written(
        made: tuple[ApiStats, ApiStats | None, float, float], write_start: float, write_end: float
    ) -> None:
        """The answer ``made`` (what :meth:`timed` left in the connection's table) was handed to the
        socket between ``write_start`` and ``write_end``."""
        api, kind, read_at, ready = made
        queued = bisect_left(BUCKETS_MS, queue_ms := (write_start - ready) * 1000.0)
        sending = bisect_left(BUCKETS_MS, send_ms := (write_end - write_start) * 1000.0)
        total = bisect_left(BUCKETS_MS, total_ms := (write_end - read_at) * 1000.0)
        for stats in (api, kind) if kind is not None else (api,):
            h = stats.response_queue
            h.counts[queued] += 1
            h.sum += queue_ms
            h = stats.response_send
            h.counts[sending] += 1
            h.sum += send_ms
            h = stats.total
            h.counts[total] += 1
            h.sum += total_ms

    # -- scrape time ---------------------------------------------------------------------------------

    def collect(self, families: Families) -> None:
        requests = jmx("network", "RequestMetrics", "RequestsPerSec")
        errors = jmx("network", "RequestMetrics", "ErrorsPerSec")
        families.declare(requests, "Requests done, per API and version.", "counter")
        families.declare(errors, "Error codes in answers, per API and error (NONE included).", "counter")
        for key in sorted(self.apis):
            stats = self.apis[key]
            kinds = list(self.fetch_kinds.values()) if key == FETCH_KEY else []
            for each in (stats, *kinds):
                name = each.name
                for version, n in sorted(each.requests.items()):
                    families.counter(requests, "", n, {"request": name, "version": str(version)})
                for attr, mbean, meaning in TIMES:
                    histogram = getattr(each, attr)
                    if histogram.count:
                        families.histogram(
                            jmx("network", "RequestMetrics", mbean), meaning, histogram, {"request": name}
                        )
            for code, n in sorted(stats.errors.items()):
                families.counter(errors, "", n, {"request": stats.name, "error": error_name(code)})


class _CountingHandler:
    """A handler module's stand-in whose ``handle`` also counts the error codes of the answer (and,
    for Fetch, tells the running request whether a follower or a consumer fetches)."""

    def __init__(self, module: Any, stats: ApiStats, kinds: dict[bool, ApiStats] | None = None) -> None:
        self.API_KEY = module.API_KEY
        self.MIN_VERSION = module.MIN_VERSION
        self.MAX_VERSION = module.MAX_VERSION
        self.REQUEST = module.REQUEST
        self._module = module
        self._handle = module.handle
        self._stats = stats
        self._kinds = kinds
        self._counters: dict[int, Counter] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    async def handle(self, ctx: Any, request: Any) -> Any:
        if self._kinds is not None and _running is not None:
            # Runs in the request's first step, inside its _TimedRequest.send().
            _running.kind = self._kinds[bool(self._module.is_from_follower(ctx.api_version, request))]
        response = await self._handle(ctx, request)
        if response is not None:
            counter = self._counters.get(ctx.api_version)
            if counter is None:
                counter = self._counters[ctx.api_version] = error_counter(type(response), ctx.api_version)
            counter(response, self._stats.errors)
        return response


# The _TimedRequest whose step is running (steps never nest: a handler does not run another request).
_running: _TimedRequest | None = None


class _TimedRequest(collections.abc.Coroutine):
    """A request's coroutine, timed step by step (see the module's table). ``kind``: the second name
    a Fetch is counted under (FetchConsumer / FetchFollower), None for other APIs."""

    __slots__ = (
        "_coro",
        "_stats",
        "kind",
        "_version",
        "_read_at",
        "_answers",
        "_clock",
        "_started",
        "_local",
    )

    def __init__(
        self,
        coro: collections.abc.Coroutine,
        stats: ApiStats,
        kind: ApiStats | None,
        version: int,
        read_at: float,
        answers: dict,
        clock: Any,
    ) -> None:
        self._coro = coro
        self._stats = stats
        self.kind = kind
        self._version = version
        self._read_at = read_at
        self._answers = answers
        self._clock = clock
        self._started = 0.0
        self._local = 0.0

    def send(self, value: Any) -> Any:
        global _running
        start = self._clock()
        if not self._started:
            self._started = start
        outer, _running = _running, self
        try:
            yielded = self._coro.send(value)
        except StopIteration as done:
            self._done(start, done.value)
            raise
        except BaseException:
            self._done(start, None)
            raise
        finally:
            _running = outer
        self._local += self._clock() - start
        return yielded

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        global _running
        start = self._clock()
        outer, _running = _running, self
        try:
            yielded = self._coro.throw(typ) if val is None and tb is None else self._coro.throw(typ, val, tb)
        except StopIteration as done:
            self._done(start, done.value)
            raise
        except BaseException:
            self._done(start, None)
            raise
        finally:
            _running = outer
        self._local += self._clock() - start
        return yielded

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def _done(self, step_start: float, answer: Any) -> None:
        # Histograms observed inline (bisect into the bucket counts, add to the sum): this runs for
        # every request, and a function call per observation was most of its cost.
        end = self._clock()
        version = self._version
        read_at = self._read_at
        local = (self._local + (end - step_start)) * 1000.0
        started = self._started or step_start
        queue = (started - read_at) * 1000.0
        remote = (end - started) * 1000.0 - local
        queue_bucket = bisect_left(BUCKETS_MS, queue)
        local_bucket = bisect_left(BUCKETS_MS, local)
        remote_bucket = bisect_left(BUCKETS_MS, remote) if remote > 0.0 else 0
        throttled = type(answer) is ThrottledAnswer
        if throttled:
            throttle_ms = answer.throttle_ms
            answer = answer.frame
        kind = self.kind
        for stats in (self._stats, kind) if kind is not None else (self._stats,):
            requests = stats.requests
            requests[version] = requests.get(version, 0) + 1
            h = stats.queue
            h.counts[queue_bucket] += 1
            h.sum += queue
            h = stats.local
            h.counts[local_bucket] += 1
            h.sum += local
            h = stats.remote
            h.counts[remote_bucket] += 1  # bucket 0 for the usual handler that never waited
            if remote > 0.0:
                h.sum += remote
            if throttled:
                _observe(stats.throttle, throttle_ms)
            else:
                stats.throttle.counts[0] += 1
            if answer is None:  # nothing to write (acks=0, a failure): done now
                stats.response_queue.counts[0] += 1
                stats.response_send.counts[0] += 1
                _observe(stats.total, (end - read_at) * 1000.0)
        if answer is not None:
            self._answers[id(answer)] = (self._stats, kind, read_at, end)


def _observe(histogram: Histogram, value_ms: float) -> None:
    """``histogram.observe(value_ms)``, inlined: the request path runs it up to seven times."""
    histogram.counts[bisect_left(BUCKETS_MS, value_ms)] += 1
    histogram.sum += value_ms
