"""Authorized operations (KIP-430) as a broker without an authorizer reports them.

Describe APIs can be asked for the operations the caller may perform on what they describe: a 32-bit
field with bit ``n`` set for ACL operation code ``n``. With no authorizer configured (onceflow has
none) Kafka reports every operation the resource type supports; when the caller did not ask, it
sends the schema default, ``-2^31``.

The sets below are of operation codes. kafka-python's message classes take such a set (``None`` for
not asked) and encode the bit field themselves; our own schemas (ConsumerGroupDescribe) carry the
plain int of :func:`bitfield`.
"""

from __future__ import annotations

from enum import IntEnum

NOT_REQUESTED = -(2**31)


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes (the bit positions of the field)."""

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


_Op = AclOperation
# What each resource type supports (Kafka's AclEntry.supportedOperations).
TOPIC = frozenset(
    {
        _Op.READ,
        _Op.WRITE,
        _Op.CREATE,
        _Op.DESCRIBE,
        _Op.DELETE,
        _Op.ALTER,
        _Op.DESCRIBE_CONFIGS,
        _Op.ALTER_CONFIGS,
    }
)
GROUP = frozenset({_Op.READ, _Op.DESCRIBE, _Op.DELETE})
CLUSTER = frozenset(
    {
        _Op.CREATE,
        _Op.CLUSTER_ACTION,
        _Op.DESCRIBE_CONFIGS,
        _Op.ALTER_CONFIGS,
        _Op.IDEMPOTENT_WRITE,
        _Op.ALTER,
        _Op.DESCRIBE,
    }
)


def reported(operations: frozenset[AclOperation], requested: bool) -> frozenset[int] | None:
    """The value for a kafka-python message: the codes if the caller asked for them, else None."""
    return frozenset(int(op) for op in operations) if requested else None


def bitfield(operations: frozenset[AclOperation], requested: bool) -> int:
    """The field as an int: bit ``n`` for operation code ``n``, or the not-requested marker."""
    return sum(1 << op for op in operations) if requested else NOT_REQUESTED
