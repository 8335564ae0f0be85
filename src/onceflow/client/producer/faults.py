"""Client-side fault points: lose a Produce response, lose a Produce request, delay a send.

They make the seeds' sequence flows reproducible with the real sender: a dropped response is a lost
ACK (the broker appended, the producer times out after request.timeout.ms and retries), a dropped
request is a lost batch (never written; later batches meet a sequence gap). Each fault fires with a
probability, or on planned Produce requests (numbered from 1 in the order the sender sends them).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

DROP_RESPONSE = "drop-response"
DROP_REQUEST = "drop-request"
DELAY_SEND = "delay-send"
FAULT_POINTS = frozenset({DROP_RESPONSE, DROP_REQUEST, DELAY_SEND})
DEFAULT_PARAMETERS = {"delay-send.ms": 100.0}


class ClientFaults:
    def __init__(self, settings: Mapping[str, float] | None = None, *, seed: int | None = None) -> None:
        self._probabilities: dict[str, float] = {}
        self._planned: dict[str, set[int]] = {}
        self.parameters = dict(DEFAULT_PARAMETERS)
        self._random = random.Random(seed)
        self.fired: list[tuple[str, int]] = []  # (fault, request number), for tests and logs
        for name, value in (settings or {}).items():
            if name in self.parameters:
                self.parameters[name] = float(value)
            else:
                self.set(name, value)

    def set(self, name: str, probability: float) -> None:
        _check(name)
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError(f"fault {name!r}: probability {probability} is not within 0..1")
        self._probabilities[name] = float(probability)

    def plan(self, name: str, request_numbers: Iterable[int]) -> None:
        """Fire ``name`` on exactly these Produce requests (1 = the first the sender sends)."""
        _check(name)
        self._planned.setdefault(name, set()).update(request_numbers)

    def fires(self, name: str, request_number: int) -> bool:
        hit = request_number in self._planned.get(name, ())
        if not hit:
            p = self._probabilities.get(name, 0.0)
            hit = p > 0.0 and self._random.random() < p
        if hit:
            self.fired.append((name, request_number))
        return hit

    @property
    def active(self) -> bool:
        return any(self._probabilities.values()) or any(self._planned.values())


def _check(name: str) -> None:
    if name not in FAULT_POINTS:
        raise ValueError(f"unknown client fault point {name!r}; known: {', '.join(sorted(FAULT_POINTS))}")
