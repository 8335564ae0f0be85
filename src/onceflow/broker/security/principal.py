"""Who a connection is: Kafka's ``KafkaPrincipal`` (``User:alice``), and how a TLS client certificate
becomes one.

A connection starts as ``User:ANONYMOUS``. SASL makes it ``User:<username>``; on an SSL listener with
client authentication, the certificate's subject in RFC 2253 form (``CN=alice,OU=eng,O=onceflow``,
most specific part first, as Java's ``X500Principal.getName()`` writes it) goes through
``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``): each ``RULE:pattern/replacement/[LU]``
applies when its Java-style regular expression matches the whole name, ``DEFAULT`` keeps the name, and
the first rule that applies wins. A name no rule applies to refuses the connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``); ValueError otherwise."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} is not of the form <type>:<name>, e.g. User:alice")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
WILDCARD = KafkaPrincipal(USER_TYPE, "*")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


# -- certificate subject as Java writes it (RFC 2253) -----------------------------------------------------

# The attribute types X500Principal.getName() names by keyword; others print as OID=#<hex DER value>.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13)}
_SPECIAL = set(',+"\\<>;')


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in _SPECIAL or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    body = value.encode()
    if len(body) < 128:
        length = bytes([len(body)])
    else:
        size = len(body).to_bytes((len(body).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return (bytes([tag]) + length + body).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    oid = _OIDS.get(name)
    if oid is not None:
        return f"{oid[0]}=#{_der_hex(oid[1], value)}"
    return f"{name}={_escape(value)}"


def distinguished_name(peercert: dict) -> str:
    """The subject of a certificate as ``ssl``'s ``getpeercert()`` gives it, in RFC 2253 form."""
    rdns = peercert.get("subject", ())
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(rdns))


# -- ssl.principal.mapping.rules ---------------------------------------------------------------------------

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a certificate's name."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _python_replacement(java: str, groups: int) -> str:
    """A Java ``replaceAll`` replacement (``$1``, ``\\$``) as a ``re.sub`` one. As Kafka does, a back
    reference past the pattern's groups loses digits until it names one, or stays literal."""
    out = []
    i = 0
    while i < len(java):
        ch = java[i]
        if ch == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        match = _BACK_REFERENCE.match(java, i)
        if match is not None:
            digits = match.group(1)
            number = int(digits)
            while number > groups and number >= 10:
                number //= 10
            if number > groups:
                out.append("$")
                i += 1
                continue
            used = len(str(number))
            out.append(f"\\g<{number}>")
            i += 1 + used
            continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``; raises ValueError for rules that do not parse."""

    def __init__(self, rules: str | None = None) -> None:
        text = (rules if rules is not None else "DEFAULT").strip()
        self._rules: list[_Rule] = []
        for match in _RULE_SPLITTER.finditer(text):
            rule = match.group(1)
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")
            if parsed.group(1) is not None:
                self._rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"ssl.principal.mapping.rules: bad pattern in {rule!r}: {exc}") from None
                replacement = _python_replacement(parsed.group(3), pattern.groups)
                self._rules.append(_Rule(pattern, replacement, parsed.group(4)))
            elif parsed.group(5):
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")
            if match.end() == len(text):
                break

    def name_for(self, distinguished: str) -> str:
        for rule in self._rules:
            name = rule.apply(distinguished)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {distinguished!r}")
