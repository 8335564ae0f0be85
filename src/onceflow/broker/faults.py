"""Named fault points for tests and chaos runs, all off by default.

A fault point is a name with a probability in [0, 1]; code on the hot path asks ``faults.fire(name)``
and, when it says yes, misbehaves in that named way. Parameters of a fault (how long a delay lasts)
are set with the same mapping under ``<name>.<param>`` keys, e.g. ``delay-response.ms``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping

log = logging.getLogger(__name__)

# Produce path. Read but ignore the request: no append, no response (a lost request).
DROP_REQUEST_BEFORE_APPEND = "drop-request-before-append"
# Produce path. Append, then never send the response (a lost ACK: the client times out and retries).
DROP_RESPONSE_AFTER_APPEND = "drop-response-after-append"
# Produce path. Append, then close the connection instead of answering: also a lost ACK, but one
# every client notices at once (a request timeout can be long), so its retry comes promptly.
DISCONNECT_AFTER_APPEND = "disconnect-after-append"
# Produce path. Sleep ``delay-response.ms`` before sending the response.
DELAY_RESPONSE = "delay-response"

# Transaction coordinator. Exit the process (os._exit) once PrepareCommit/PrepareAbort is in
# __transaction_state, before any marker is written: recovery must then finish the transaction.
CRASH_AFTER_PREPARE = "crash-after-prepare"

# Produce path, replicated partitions. Once an acks=all produce is in every ISR member's log, kill
# the process (SIGKILL) before answering: the seeds' failover story, where the producer's retry goes
# to the new leader, which must answer it as a duplicate with the original offset.
CRASH_AFTER_REPLICATION = "crash-after-replication"

# Coordinator runtime. An append to __consumer_offsets or __transaction_state fails as a broken disk
# would (KAFKA_STORAGE_ERROR) with nothing written: the coordinator's state stays as it was and the
# request is answered NOT_COORDINATOR, which clients retry.
FAIL_COORDINATOR_APPEND = "fail-coordinator-append"

FAULT_POINTS = frozenset(
    {
        CRASH_AFTER_REPLICATION,
        DROP_REQUEST_BEFORE_APPEND,
        DROP_RESPONSE_AFTER_APPEND,
        DISCONNECT_AFTER_APPEND,
        DELAY_RESPONSE,
        CRASH_AFTER_PREPARE,
        FAIL_COORDINATOR_APPEND,
    }
)
DEFAULT_PARAMETERS = {"delay-response.ms": 1000.0}


class Faults:
    """Probabilities per fault point, and a random source (seedable for reproducible tests)."""

    def __init__(self, settings: Mapping[str, float] | None = None, *, seed: int | None = None) -> None:
        self._probabilities: dict[str, float] = {}
        self._parameters: dict[str, float] = dict(DEFAULT_PARAMETERS)
        self._random = random.Random(seed)
        for name, value in (settings or {}).items():
            if name in self._parameters:
                self.set_parameter(name, value)
            else:
                self.set(name, value)

    def set(self, name: str, probability: float) -> None:
        if name not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {name!r}; known: {', '.join(sorted(FAULT_POINTS))}")
        probability = float(probability)
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"fault {name!r}: probability {probability} is not within 0..1")
        if probability:
            self._probabilities[name] = probability
            log.warning("fault point %s enabled with probability %s", name, probability)
        else:
            self._probabilities.pop(name, None)

    def set_parameter(self, name: str, value: float) -> None:
        if name not in self._parameters:
            raise ValueError(
                f"unknown fault parameter {name!r}; known: {', '.join(sorted(self._parameters))}"
            )
        self._parameters[name] = float(value)

    def parameter(self, name: str) -> float:
        return self._parameters[name]

    def clear(self) -> None:
        self._probabilities.clear()

    def fire(self, name: str) -> bool:
        """Whether fault ``name`` happens this time."""
        probability = self._probabilities.get(name)
        if not probability:
            return False
        fired = probability >= 1.0 or self._random.random() < probability
        if fired:
            log.info("fault %s fired", name)
        return fired

    @property
    def delay_response_s(self) -> float:
        return self._parameters["delay-response.ms"] / 1000.0
