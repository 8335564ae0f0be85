"""Kafka's ACL codes as they travel in CreateAcls / DescribeAcls / DeleteAcls (``int8`` fields):
resource types, pattern types, operations and permission types. The broker's authorizer and the
client's admin API share them; ``from_text`` reads the names ``kafka-acls.sh`` takes, and
``binding_wire_fields`` writes a binding as the messages carry it."""

from __future__ import annotations

import enum
from typing import Any


class _Named(enum.IntEnum):
    @classmethod
    def from_text(cls, text: str):
        """``"describe-configs"``, ``"DescribeConfigs"`` or ``"DESCRIBE_CONFIGS"``; ValueError otherwise."""
        key = text.strip().replace("-", "_").upper()
        aliases = {k.replace("_", ""): k for k in cls.__members__}
        key = aliases.get(key.replace("_", ""), key)
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(
                n.lower().replace("_", "-") for n in cls.__members__ if n not in ("UNKNOWN", "ANY", "MATCH")
            )
            raise ValueError(f"{text!r} is not one of {names}") from None


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def binding_wire_fields(acl: Any, pattern_field: str = "pattern_type") -> dict[str, Any]:
    """An ACL binding (anything with ``resource_type``, ``name``, ``pattern_type``, ``principal``,
    ``host``, ``operation`` and ``permission``) as the wire carries it: AccessControlEntryRecord and
    DeleteAcls' matching ACLs name its pattern ``pattern_type``, CreateAcls ``resource_pattern_type``."""
    return {
        "resource_type": int(acl.resource_type),
        "resource_name": acl.name,
        pattern_field: int(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission),
    }
