"""Authorized operations (KIP-430): the operations the caller may perform on what a Describe API
describes, as a 32-bit field with bit ``n`` set for ACL operation code ``n``.

Without an authorizer Kafka reports every operation the resource type supports; with one, those the
authorizer allows the request's principal (``security.access.operations``). When the caller did not
ask, it sends the schema default, ``-2^31``.

The sets below are of operation codes. kafka-python's message classes take such a set (``None`` for
not asked) and encode the bit field themselves; our own schemas (ConsumerGroupDescribe) carry the
plain int of :func:`bitfield`.
"""

from __future__ import annotations

from onceflow.broker.security.acls import SUPPORTED_OPERATIONS, AclOperation, ResourceType

NOT_REQUESTED = -(2**31)

# What each resource type supports (Kafka's AclEntry.supportedOperations).
TOPIC = SUPPORTED_OPERATIONS[ResourceType.TOPIC]
GROUP = SUPPORTED_OPERATIONS[ResourceType.GROUP]
CLUSTER = SUPPORTED_OPERATIONS[ResourceType.CLUSTER]

__all__ = ["CLUSTER", "GROUP", "NOT_REQUESTED", "TOPIC", "AclOperation", "bitfield", "reported"]


def reported(operations: frozenset[AclOperation], requested: bool) -> frozenset[int] | None:
    """The value for a kafka-python message: the codes if the caller asked for them, else None."""
    return frozenset(int(op) for op in operations) if requested else None


def bitfield(operations: frozenset[AclOperation], requested: bool) -> int:
    """The field as an int: bit ``n`` for operation code ``n``, or the not-requested marker."""
    return sum(1 << op for op in operations) if requested else NOT_REQUESTED
