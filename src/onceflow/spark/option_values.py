"""Reading a data source's options: Spark's value syntax, and the refusal of options nobody read.

Spark hands a Python data source its options as strings with lower-case names. :class:`OptionReader`
looks them up, remembers which were read, and refuses the rest with the nearest known name suggested,
spelt as Spark's guide spells it. The value parsers follow Spark's: booleans are ``true``/``false`` in
any case, durations are Spark's time strings (``500``, ``10s``, ``15m``; no unit means milliseconds).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

__all__ = ["OptionReader", "boolean", "positive_int", "time_ms"]


class OptionReader:
    """The options of one read or write. ``known`` maps lower-case names to their spelling."""

    def __init__(self, options: Mapping[str, str], known: Mapping[str, str], *, what: str) -> None:
        self._options = {str(k).lower(): str(v) for k, v in options.items()}
        self._known = known
        self._what = what
        self._read: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._options

    def take(self, name: str, default: str | None = None) -> str | None:
        """The value of option ``name`` (lower case), or ``default``; the option counts as read."""
        self._read.add(name)
        return self._options.get(name, default)

    def spelled(self, name: str) -> str:
        return self._known.get(name, name)

    def kafka_options(self) -> dict[str, str]:
        """Every ``kafka.*`` option (all count as read: their own rules judge them)."""
        found = {k: v for k, v in self._options.items() if k.startswith("kafka.")}
        self._read.update(found)
        return found

    def refuse_unknown(self) -> None:
        """Raise ValueError naming every option that is not known and was not read."""
        unknown = sorted(k for k in self._options if k not in self._read and k not in self._known)
        if not unknown:
            return
        names = sorted(self._known.values())
        described = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(self._known), n=1, cutoff=0.75)
            described.append(f"{name} (did you mean {self._known[close[0]]}?)" if close else name)
        raise ValueError(
            f"{self._what} does not know the option(s) {', '.join(described)}; its options are "
            f"{', '.join(names)} and kafka.* Kafka client settings"
        )


def _get(options: OptionReader | Mapping[str, str], name: str) -> str | None:
    if isinstance(options, OptionReader):
        return options.take(name)
    return options.get(name)


def _label(options: OptionReader | Mapping[str, str], name: str, label: str | None) -> str:
    if label is not None:
        return label
    return options.spelled(name) if isinstance(options, OptionReader) else name


def positive_int(
    options: OptionReader | Mapping[str, str], name: str, label: str | None = None
) -> int | None:
    """Option ``name`` as an integer above 0, or None when it is not given."""
    text = _get(options, name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"option {_label(options, name, label)}={text!r} must be a positive integer")
    return value


def boolean(options: OptionReader, name: str, default: bool) -> bool:
    text = options.take(name)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {options.spelled(name)}={text!r} must be true or false")
    return value == "true"


# Spark's time suffixes (JavaUtils.timeStringAs), in milliseconds.
_TIME_UNITS = {
    "us": 0.001,
    "usec": 0.001,
    "ms": 1,
    "msec": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_TIME = re.compile(r"\s*(\d+)\s*([a-z]*)\s*")


def time_ms(options: OptionReader, name: str, default: int) -> int:
    """A duration as Spark writes one (``500``, ``10s``, ``15m``, ``1h``), in milliseconds."""
    text = options.take(name)
    if text is None:
        return default
    match = _TIME.fullmatch(text.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS):
        raise ValueError(
            f"option {options.spelled(name)}={text!r} is not a duration such as 500 (ms), 10s, 15m or 1h"
        )
    return int(int(match.group(1)) * _TIME_UNITS.get(match.group(2) or "ms", 1))
