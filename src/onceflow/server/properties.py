"""Kafka's ``server.properties`` format (Java's ``.properties``): ``key=value``, ``key: value`` or
``key value`` lines, ``#``/``!`` comments, a trailing backslash continuing a line, and backslash
escapes (``\\t``, ``\\n``, ``\\uXXXX``, ``\\=``)."""

from __future__ import annotations

from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file that cannot be read; the message names the file and line."""


def _logical_lines(text: str):
    """(first physical line number, joined line) with continuations folded in."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t\f") if pending else raw.lstrip(" \t\f")
        if not pending:
            start = number
            if not line or line[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "u":
            code = text[i + 2 : i + 6]
            try:
                out.append(chr(int(code, 16)))
            except ValueError:
                raise PropertiesError(f"{where}: bad unicode escape \\u{code}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The key/value pairs of ``text``; a later key wins, as in Java."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":") and (i >= len(line) or line[i] not in "=:"):
            rest = rest[1:].lstrip(" \t\f")
        elif i < len(line) and line[i] in "=:":
            rest = line[i + 1 :].lstrip(" \t\f")
        result[_unescape(key, where)] = _unescape(rest, where)
    return result


def read_properties(path: Path) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PropertiesError(f"{path} is not UTF-8 text: {exc}") from None
    return parse_properties(text, str(path))
