"""Outbound requests per destination (Kafka's raft ``RequestManager``): at most one in flight to each
node, each answer matched by its correlation id, a request that gets no answer within
``request.timeout.ms`` given up, and ``retry.backoff.ms`` of waiting after a failure.

Answers that are no longer expected (a duplicate, one to a request given up or sent in a state the
node has left, which ``reset_all`` forgets) are recognised by ``is_expected`` and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Connection:
    correlation_id: int | None = None  # the request in flight
    sent_ms: int = 0
    backoff_until_ms: int = 0


class RequestManager:
    def __init__(self, *, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._connections: dict[int, _Connection] = {}
        self._next_correlation_id = 1

    def _get(self, destination: int) -> _Connection:
        connection = self._connections.get(destination)
        if connection is None:
            connection = self._connections[destination] = _Connection()
        return connection

    def _expire(self, connection: _Connection, now_ms: int) -> None:
        if connection.correlation_id is not None and now_ms >= connection.sent_ms + self._request_timeout_ms:
            connection.correlation_id = None
            connection.backoff_until_ms = (
                connection.sent_ms + self._request_timeout_ms + self._retry_backoff_ms
            )

    def is_ready(self, destination: int, now_ms: int) -> bool:
        """Nothing in flight to ``destination`` and no backoff running."""
        connection = self._get(destination)
        self._expire(connection, now_ms)
        return connection.correlation_id is None and now_ms >= connection.backoff_until_ms

    def is_backing_off(self, destination: int, now_ms: int) -> bool:
        connection = self._get(destination)
        self._expire(connection, now_ms)
        return connection.correlation_id is None and now_ms < connection.backoff_until_ms

    def has_timed_out(self, destination: int, now_ms: int) -> bool:
        """Whether the last request to ``destination`` was given up without an answer (and the
        backoff that follows is running)."""
        connection = self._get(destination)
        had = connection.correlation_id is not None
        self._expire(connection, now_ms)
        return had and connection.correlation_id is None

    def has_inflight(self, now_ms: int) -> bool:
        return self.first_timeout(now_ms) is not None

    def first_timeout(self, now_ms: int) -> int | None:
        """When the earliest request in flight is given up, or None if none is in flight."""
        first = None
        for connection in self._connections.values():
            self._expire(connection, now_ms)
            if connection.correlation_id is not None:
                timeout = connection.sent_ms + self._request_timeout_ms
                first = timeout if first is None else min(first, timeout)
        return first

    def ready_at(self, destination: int) -> int:
        """When ``destination`` can next be sent to (a time already past if now)."""
        connection = self._get(destination)
        if connection.correlation_id is not None:
            return connection.sent_ms + self._request_timeout_ms
        return connection.backoff_until_ms

    def on_sent(self, destination: int, now_ms: int) -> int:
        """Record a request sent to ``destination``; returns its correlation id."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        connection = self._get(destination)
        connection.correlation_id = correlation_id
        connection.sent_ms = now_ms
        return correlation_id

    def is_expected(self, source: int, correlation_id: int) -> bool:
        connection = self._connections.get(source)
        return connection is not None and connection.correlation_id == correlation_id

    def on_response(self, source: int, correlation_id: int, *, success: bool, now_ms: int) -> None:
        connection = self._connections.get(source)
        if connection is None or connection.correlation_id != correlation_id:
            return
        connection.correlation_id = None
        connection.backoff_until_ms = now_ms if success else now_ms + self._retry_backoff_ms

    def on_failure(self, destination: int, correlation_id: int, now_ms: int) -> None:
        """The request could not be delivered (the driver's connection failed)."""
        self.on_response(destination, correlation_id, success=False, now_ms=now_ms)

    def reset(self, destination: int) -> None:
        self._connections.pop(destination, None)

    def reset_all(self) -> None:
        """Forget every request in flight and every backoff (a change of state)."""
        self._connections.clear()
