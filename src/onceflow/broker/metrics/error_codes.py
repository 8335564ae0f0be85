"""Counting the error codes of a response object, as Kafka's ``AbstractResponse.errorCounts``: every
``ErrorCode`` field the response carries, at any depth (a Produce answer has one per partition; a
Fetch answer a top-level one plus one per partition), ``NONE`` included.

Which fields those are depends on the API and its version only, so the walk is compiled once per
(API, version) from the message schema (kafka-python's field tree) into nested loops, and a response
costs a few attribute reads per error field it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Counter = Callable[[Any, dict[int, int]], None]


def error_counter(response_class: Any, version: int) -> Counter:
    """A function adding one to ``counts[code]`` for each error code in a ``response_class`` response
    of ``version``."""
    visitors = _visitors(response_class.fields, version)

    def count(response: Any, counts: dict[int, int]) -> None:
        for visit in visitors:
            visit(response, counts)

    if len(visitors) == 1:
        return visitors[0]
    return count


def _visitors(fields: dict[str, Any], version: int) -> list[Counter]:
    visitors: list[Counter] = []
    for attr, field in fields.items():
        if not field.for_version_q(version):
            continue
        if field.is_struct_array():
            inner = _visitors(field.fields, version)
            if inner:
                visitors.append(_each(attr, inner))
        elif field.is_struct():
            inner = _visitors(field.fields, version)
            if inner:
                visitors.append(_nested(attr, inner))
        elif attr.endswith("error_code") and field.type_str == "int16":
            visitors.append(_leaf(attr))
    return visitors


def _leaf(attr: str) -> Counter:
    def visit(obj: Any, counts: dict[int, int]) -> None:
        code = getattr(obj, attr, None)
        if code is not None:
            counts[code] = counts.get(code, 0) + 1

    return visit


def _each(attr: str, inner: list[Counter]) -> Counter:
    if len(inner) == 1:
        (only,) = inner

        def visit_one(obj: Any, counts: dict[int, int]) -> None:
            for item in getattr(obj, attr, None) or ():
                only(item, counts)

        return visit_one

    def visit(obj: Any, counts: dict[int, int]) -> None:
        for item in getattr(obj, attr, None) or ():
            for v in inner:
                v(item, counts)

    return visit


def _nested(attr: str, inner: list[Counter]) -> Counter:
    def visit(obj: Any, counts: dict[int, int]) -> None:
        value = getattr(obj, attr, None)
        if value is not None:
            for v in inner:
                v(value, counts)

    return visit
