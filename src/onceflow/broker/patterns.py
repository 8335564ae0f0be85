"""Regular expressions that clients send to the broker, compiled with RE2 as Kafka compiles them with
RE2/J: KIP-848's SubscribedTopicRegex and ListTransactions' TransactionalIdPattern (KIP-1152).

RE2 matches in time linear in the input. A pattern such as ``(a+)+b`` takes Python's backtracking
``re`` exponential time on a name of a's (a 30-character topic name: minutes), and the broker has one
event loop: a single heartbeat would stall every client. The syntax is Kafka's as well: what RE2
lacks (backreferences, lookaround) is INVALID_REGULAR_EXPRESSION here as it is on a Kafka broker.
Both uses match whole names (RE2/J's ``matches()``), so callers use ``fullmatch``.
"""

from __future__ import annotations

import functools

import re2

from onceflow.protocol.errors import ErrorCode, KafkaError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error goes back to the client; RE2 would also print it to stderr


@functools.lru_cache(maxsize=1024)  # heartbeats repeat a member's regex; compile each once
def compile_pattern(pattern: str, field: str):
    """``pattern`` compiled (``fullmatch(name)`` is not None for a match), or INVALID_REGULAR_EXPRESSION
    naming ``field``, the request field it came in."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise KafkaError(
            f"{field} {pattern!r} is not a valid regular expression: {reason}",
            ErrorCode.INVALID_REGULAR_EXPRESSION,
        ) from None
