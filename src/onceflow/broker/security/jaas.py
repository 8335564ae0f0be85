"""Kafka's ``sasl.jaas.config`` values: ``<login module class> <flag> key="value" ...;``.

The broker reads one thing from them: the PLAIN users of ``PlainLoginModule``, given as
``user_<name>="<password>"`` options (Kafka's ``PlainServerCallbackHandler`` checks passwords against
exactly these). Values are double-quoted with ``\\"`` and ``\\\\`` escapes, or bare words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*("(?:\\.|[^"\\])*"|[^\s;"]+)|(;))')


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas(text: str, what: str = "sasl.jaas.config") -> list[JaasEntry]:
    """Every login module entry of ``text``; ValueError naming ``what`` if it does not parse."""
    entries: list[JaasEntry] = []
    rest = text.strip()
    while rest:
        head = re.match(r"([A-Za-z0-9_.$]+)\s+([A-Za-z]+)", rest)
        if head is None:
            raise ValueError(
                f"{what}: expected '<LoginModule class> required key=\"value\" ...;' at {rest[:40]!r}"
            )
        module, flag = head.group(1), head.group(2).lower()
        if flag not in FLAGS:
            raise ValueError(f"{what}: {head.group(2)!r} is not a JAAS flag ({', '.join(sorted(FLAGS))})")
        pos = head.end()
        options: dict[str, str] = {}
        while True:
            token = _TOKEN.match(rest, pos)
            if token is None:
                raise ValueError(f"{what}: cannot read the options of {module} at {rest[pos : pos + 40]!r}")
            pos = token.end()
            if token.group(3):  # ';' ends the entry
                break
            value = token.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            options[token.group(1)] = value
        entries.append(JaasEntry(module, flag, options))
        rest = rest[pos:].strip()
    if not entries:
        raise ValueError(f"{what} is empty")
    return entries


def plain_users(text: str, what: str = "sasl.jaas.config") -> dict[str, str]:
    """The ``user_<name>="<password>"`` entries of the PlainLoginModule in ``text``: name -> password."""
    users: dict[str, str] = {}
    found = False
    for entry in parse_jaas(text, what):
        if entry.login_module != PLAIN_LOGIN_MODULE:
            continue
        found = True
        for key, value in entry.options.items():
            if key.startswith("user_") and len(key) > len("user_"):
                users[key[len("user_") :]] = value
    if not found:
        raise ValueError(f"{what} has no {PLAIN_LOGIN_MODULE} entry")
    return users
