"""The ACL data model the broker's security uses: Kafka's bindings, filters and their checks, which
live in ``metadata.acls`` (the controller and the metadata image share them); re-exported here so the
broker's modules name them where the rest of its security is."""

from onceflow.metadata.acls import (
    CLUSTER_NAME,
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    UNKNOWN_FIELD,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    check_new_binding,
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
