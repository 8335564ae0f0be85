"""Type checks for the arguments of the client's public methods.

A wrong type is refused where the user passed it, with a ``TypeError`` naming the argument and what
it must be, instead of failing deep in the wire encoder (``struct.error: required argument is not an
integer``) or in an unrelated comparison. Python's own convention (``int("3")`` is the caller's job) is
kept: a string is not taken for a number. Only the cheap ``type(...) is`` tests run on hot paths.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

__all__ = ["check_duration", "check_headers", "check_int", "check_str", "check_str_mapping"]


def _refuse(name: str, wanted: str, value: Any) -> TypeError:
    return TypeError(f"{name} must be {wanted}, not {type(value).__name__} {value!r}")


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (any integer type, such as numpy's; not a bool, a float or a string), at least
    ``minimum``; else TypeError/ValueError naming it."""
    if type(value) is not int:
        if isinstance(value, bool):
            raise _refuse(name, "an int", value)
        try:
            value = operator.index(value)
        except TypeError:
            raise _refuse(name, "an int", value) from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def check_duration(value: Any, name: str) -> float:
    """A time span (``timeout_ms`` and the like): an int or a float, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(name, "a number", value)
    if value < 0:
        raise ValueError(f"{name} must not be negative, not {value}")
    return value


def check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _refuse(name, "a str", value)
    return value


def check_str_mapping(value: Mapping | None, name: str) -> dict[str, str | None] | None:
    """A mapping of config names to values (topic configs), as Kafka's APIs carry them: strings; a
    number or a bool is written as Kafka's text for it ("1000", "true")."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _refuse(name, "a dict of str to str", value)
    checked: dict[str, str | None] = {}
    for key, item in value.items():
        check_str(key, f"a key of {name}")
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif isinstance(item, int | float):
            item = str(item)
        elif item is not None and not isinstance(item, str):
            raise _refuse(f"{name}[{key!r}]", 'a str (Kafka configs are text: "1000", "true")', item)
        checked[key] = item
    return checked


def check_headers(headers: Any) -> None:
    """Record headers: a list of ``(str key, bytes or None value)`` pairs."""
    if isinstance(headers, (str, bytes, Mapping)) or not hasattr(headers, "__iter__"):
        raise _refuse("headers", "a list of (str, bytes) pairs", headers)
    for header in headers:
        if not isinstance(header, tuple | list) or len(header) != 2:
            raise _refuse("each header", "a (str, bytes) pair", header)
        key, value = header
        if not isinstance(key, str):
            raise _refuse("a header key", "a str", key)
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise _refuse(f"the value of header {key!r}", "bytes or None", value)
