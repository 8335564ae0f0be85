"""Quota entities and keys, checked as Kafka's controller checks them (ClientQuotaControlManager).

An entity names a user, a client-id, or both; a name of ``None`` is that type's default
(``<default>`` in Kafka's tools). It is kept as a sorted tuple of ``(type, name)`` pairs, so that
it can key dicts and be written as JSON as it is.

Keys, with Kafka's types: ``producer_byte_rate`` and ``consumer_byte_rate`` (whole bytes per second),
``request_percentage`` (percent of one request-handling thread's time per window: 200 is two
threads), ``controller_mutation_rate`` (accepted and stored as Kafka does; onceflow does not enforce
it, as it has no controller mutation quota yet). Every value must be above 0.

``ip`` entities (KIP-612 connection-rate quotas per address) are not supported yet: they are refused
with INVALID_REQUEST saying so, rather than accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from onceflow.protocol.errors import InvalidRequest, UnsupportedVersion

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# key -> the largest value of its Kafka type, or None for a double (fractions allowed)
QUOTA_KEYS: dict[str, int | None] = {
    PRODUCER_BYTE_RATE: 2**63 - 1,
    CONSUMER_BYTE_RATE: 2**63 - 1,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}

# Match types of a DescribeClientQuotas filter component.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

Entity = tuple[tuple[str, str | None], ...]


def entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity from ``(type, name)`` pairs (a name of None: the default); raises InvalidRequest
    for what Kafka refuses: no pair, a repeated or unknown type, an empty name, ip (not yet)."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise InvalidRequest(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type == IP:
            raise InvalidRequest(
                "ip quota entities (connection_creation_rate) are not supported by onceflow yet"
            )
        if entity_type not in (USER, CLIENT_ID):
            raise InvalidRequest(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise InvalidRequest(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise InvalidRequest("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def describe_entity(quota_entity: Entity) -> str:
    """``user=alice, client-id=<default>``: an entity as the log and the CLI show it."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in quota_entity)


def check_value(key: str, value: float) -> None:
    """Raise InvalidRequest if ``value`` is not a valid setting of ``key`` (Kafka's checks)."""
    if key not in QUOTA_KEYS:
        raise InvalidRequest(f"Invalid configuration key {key}")
    if value <= 0.0:
        raise InvalidRequest(f"Quota {key} must be greater than 0")
    largest = QUOTA_KEYS[key]
    if largest is not None:
        if value > largest:
            raise InvalidRequest(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise InvalidRequest(f"{key} cannot be a fractional value.")


def check_ops(ops: Iterable[tuple[str, float, bool]]) -> dict[str, float | None]:
    """``(key, value, remove)`` operations as ``{key: value, or None to remove}``; raises
    InvalidRequest on a repeated key or a bad value."""
    changes: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in changes:
            raise InvalidRequest(f"Duplicate quota key {key} not updating quota for this entity")
        if remove:
            if key not in QUOTA_KEYS:
                raise InvalidRequest(f"Invalid configuration key {key}")
            changes[key] = None
        else:
            check_value(key, value)
            changes[key] = float(value)
    return changes


class Filter:
    """A DescribeClientQuotas filter: components ``(entity type, match type, match)`` and ``strict``."""

    def __init__(self, components: Iterable[tuple[str, int, str | None]], strict: bool) -> None:
        self.exact: dict[str, str | None] = {}
        self.specified: set[str] = set()
        self.strict = strict
        for entity_type, match_type, match in components:
            if not entity_type:
                raise InvalidRequest("Invalid empty entity type.")
            if entity_type in self.exact or entity_type in self.specified:
                raise InvalidRequest(f"Entity type {entity_type} cannot appear more than once in the filter.")
            if entity_type not in (USER, CLIENT_ID, IP):
                raise UnsupportedVersion(f"Unsupported entity type {entity_type}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise InvalidRequest("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                self.exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise InvalidRequest(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                self.exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise InvalidRequest(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                self.specified.add(entity_type)
            else:
                raise InvalidRequest(f"Unknown match type {match_type}")
        types = set(self.exact) | self.specified
        if IP in types and types & {USER, CLIENT_ID}:
            raise InvalidRequest(
                "Invalid entity filter component combination. IP filter component should not be used "
                "with user or clientId filter component."
            )

    def matches(self, quota_entity: Entity) -> bool:
        names: Mapping[str, str | None] = dict(quota_entity)
        if self.strict and len(names) != len(self.exact) + len(self.specified):
            return False
        for entity_type, name in self.exact.items():
            if entity_type not in names or names[entity_type] != name:
                return False
        # "Specified" is any entry of the type, the default included (as Kafka's image matches it).
        return all(entity_type in names for entity_type in self.specified)
