"""ACLs as Kafka defines them: resource types, pattern types, operations, permissions, bindings and the
filters DescribeAcls / DeleteAcls match with (``org.apache.kafka.common.acl`` / ``.resource``).

A binding says: principal P from host H is ALLOWed (or DENYed) operation O on the resources of type T
whose name is N (LITERAL; ``*`` is every name) or starts with N (PREFIXED). A filter matches bindings
field by field; ANY (or a null name, principal or host) matches everything, and a MATCH pattern
filter matches the bindings that would apply to the named resource (the literal name, ``*``, and
prefixes of it).

Here, below both the broker and the controller (Kafka keeps its ``StandardAcl`` in its metadata
module too): a single node's authorizer, the controller that writes AccessControlEntryRecords and the
image that replays them share one binding type.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any

from onceflow.metadata.records import AccessControlEntryRecord
from onceflow.protocol.acl_types import (
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_wire_fields,
)

__all__ = [
    "CLUSTER_NAME",
    "RESOURCE_TYPE_NAMES",
    "SUPPORTED_OPERATIONS",
    "UNKNOWN_FIELD",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "PatternType",
    "PermissionType",
    "ResourceType",
    "check_new_binding",
]

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"


# The names Kafka prints for resource types in its authorizer log (SecurityUtils.resourceTypeName).
RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


def _enum_value(kind: type[enum.IntEnum], code: int) -> enum.IntEnum:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # UNKNOWN, as Kafka's fromCode does


def _decoded(resource_type: int, name, pattern_type: int, principal, host, operation: int, permission: int):
    """A binding's or a filter's seven wire fields, each code read as its enum (UNKNOWN if unknown)."""
    return (
        _enum_value(ResourceType, resource_type),
        name,
        _enum_value(PatternType, pattern_type),
        principal,
        host,
        _enum_value(AclOperation, operation),
        _enum_value(PermissionType, permission),
    )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def describe(self) -> str:
        return (
            f"{self.principal} has {self.permission.name} permission for operation {self.operation.name} "
            f"from host {self.host} on {RESOURCE_TYPE_NAMES.get(self.resource_type, self.resource_type.name)}:"
            f"{self.pattern_type.name}:{self.name}"
        )

    @classmethod
    def from_wire(
        cls,
        resource_type: int,
        name: str,
        pattern_type: int,
        principal: str,
        host: str,
        operation: int,
        permission: int,
    ) -> AclBinding:
        return cls(*_decoded(resource_type, name, pattern_type, principal, host, operation, permission))

    @classmethod
    def from_creation(cls, creation: Any) -> AclBinding:
        """A CreateAcls creation's binding (its pattern field is ``resource_pattern_type``)."""
        c = creation
        return cls.from_wire(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )

    @classmethod
    def from_record(cls, record: Any) -> AclBinding:
        """The binding of an AccessControlEntryRecord, or of anything with its fields (a DeleteAcls
        matching ACL): the names :meth:`wire_fields` gives."""
        r = record
        return cls.from_wire(
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            r.principal,
            r.host,
            r.operation,
            r.permission_type,
        )

    def wire_fields(self) -> dict[str, Any]:
        """The binding as AccessControlEntryRecord and DeleteAcls' matching ACLs carry it."""
        return binding_wire_fields(self)

    def to_record(self, acl_id: uuid.UUID) -> AccessControlEntryRecord:
        """The AccessControlEntryRecord that gives this binding the id ``acl_id``."""
        return AccessControlEntryRecord(id=acl_id, **self.wire_fields())


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    @property
    def unknown(self) -> bool:
        return UNKNOWN_FIELD in (self.resource_type, self.pattern_type, self.operation, self.permission)

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != acl.pattern_type:
            return False
        if self.name is not None:
            if pattern in (PatternType.ANY, acl.pattern_type):
                if self.name != acl.name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if self.name != acl.name and acl.name != WILDCARD_RESOURCE:
                    return False
            elif acl.pattern_type == PatternType.PREFIXED:
                if not self.name.startswith(acl.name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission == PermissionType.ANY or self.permission == acl.permission

    @classmethod
    def from_wire(
        cls,
        resource_type: int,
        name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission: int,
    ) -> AclBindingFilter:
        return cls(*_decoded(resource_type, name, pattern_type, principal, host, operation, permission))

    @classmethod
    def from_delete_filter(cls, f: Any) -> AclBindingFilter:
        """A DeleteAcls filter (its fields end in ``_filter``, but for operation and permission)."""
        return cls.from_wire(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )


UNKNOWN_FIELD = 0

# What each resource type supports (Kafka's AclEntry.supportedOperations; groups without the
# DESCRIBE_CONFIGS/ALTER_CONFIGS of group configs, which onceflow does not have).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def check_new_binding(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create ``acl`` (INVALID_REQUEST), or None (AclControlManager, AclApis)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {acl.permission.name}"
    if not acl.name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, who = acl.principal.partition(":")
    if not sep or not kind or not who:
        return f"Invalid principal {acl.principal!r}: expected <type>:<name>, e.g. User:alice"
    if not acl.host:
        return "Invalid empty host: use * for every host"
    return None
