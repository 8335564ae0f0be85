"""What each API the broker serves checks before it does anything, as Kafka's KafkaApis / AclApis /
ConfigHelper check it, and the error a principal without the permission gets.

This table is the reference the handlers are written and tested against (``tests/security``'s matrix
sends every API as a principal with no ACL and expects these errors); each handler makes its checks
with ``security.access`` first thing, before it changes anything. ``any_of`` requirements pass if one
of them does (Kafka's "CREATE on the cluster, else CREATE on each topic"); ``filter`` ones are not
refusals: what the principal may not see is left out of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.broker.security.acls import AclOperation as Op
from onceflow.broker.security.acls import ResourceType as Res
from onceflow.protocol.errors import ErrorCode as E


@dataclass(frozen=True)
class Requirement:
    operation: Op
    resource: Res
    what: str  # which resource of the request
    error: E | None  # the answer when denied (None: filtered out of the answer instead)
    any_of: tuple[Requirement, ...] = ()  # alternatives that pass instead of this one


def _r(operation: Op, resource: Res, what: str, error: E | None = None, *any_of: Requirement) -> Requirement:
    return Requirement(operation, resource, what, error, any_of)


_TOPIC_DENIED = E.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = E.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = E.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_CLUSTER = "the cluster"

API_ACCESS: dict[int, tuple[Requirement, ...]] = {
    0: (  # Produce
        _r(
            Op.WRITE,
            Res.TRANSACTIONAL_ID,
            "its transactional.id, if it has transactional records",
            _TXN_DENIED,
        ),
        _r(Op.WRITE, Res.TOPIC, "each topic", _TOPIC_DENIED),
    ),
    1: (  # Fetch
        _r(Op.READ, Res.TOPIC, "each topic (a consumer)", _TOPIC_DENIED),
        _r(Op.CLUSTER_ACTION, Res.CLUSTER, "the cluster (a follower: replica_id >= 0)", _TOPIC_DENIED),
    ),
    2: (_r(Op.DESCRIBE, Res.TOPIC, "each topic", _TOPIC_DENIED),),  # ListOffsets
    23: (_r(Op.DESCRIBE, Res.TOPIC, "each topic", _TOPIC_DENIED),),  # OffsetForLeaderEpoch
    3: (  # Metadata
        _r(
            Op.DESCRIBE, Res.TOPIC, "each topic named (all topics: only those it may describe)", _TOPIC_DENIED
        ),
        _r(
            Op.CREATE,
            Res.CLUSTER,
            "the cluster, to auto-create a topic",
            _TOPIC_DENIED,
            _r(Op.CREATE, Res.TOPIC, "each topic to auto-create"),
        ),
    ),
    8: (  # OffsetCommit
        _r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),
        _r(Op.READ, Res.TOPIC, "each topic", _TOPIC_DENIED),
    ),
    9: (  # OffsetFetch
        _r(Op.DESCRIBE, Res.GROUP, "each group", _GROUP_DENIED),
        _r(
            Op.DESCRIBE, Res.TOPIC, "each topic named (all topics: only those it may describe)", _TOPIC_DENIED
        ),
    ),
    10: (  # FindCoordinator
        _r(Op.DESCRIBE, Res.GROUP, "the group key", _GROUP_DENIED),
        _r(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "the transactional id key", _TXN_DENIED),
    ),
    11: (_r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),),  # JoinGroup
    12: (_r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),),  # Heartbeat
    13: (_r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),),  # LeaveGroup
    14: (_r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),),  # SyncGroup
    15: (_r(Op.DESCRIBE, Res.GROUP, "each group", _GROUP_DENIED),),  # DescribeGroups
    16: (  # ListGroups
        _r(
            Op.DESCRIBE,
            Res.CLUSTER,
            "the cluster (then every group)",
            None,
            _r(Op.DESCRIBE, Res.GROUP, "each group listed"),
        ),
    ),
    17: (),  # SaslHandshake
    18: (),  # ApiVersions
    19: (  # CreateTopics
        _r(Op.CREATE, Res.CLUSTER, _CLUSTER, _TOPIC_DENIED, _r(Op.CREATE, Res.TOPIC, "each topic")),
        _r(Op.DESCRIBE_CONFIGS, Res.TOPIC, "each topic, to see its configs in the answer", None),
    ),
    20: (  # DeleteTopics
        _r(Op.DELETE, Res.TOPIC, "each topic", _TOPIC_DENIED),
        _r(Op.DESCRIBE, Res.TOPIC, "each topic named by id, to be told its name", _TOPIC_DENIED),
    ),
    21: (_r(Op.DELETE, Res.TOPIC, "each topic", _TOPIC_DENIED),),  # DeleteRecords
    22: (  # InitProducerId
        _r(Op.WRITE, Res.TRANSACTIONAL_ID, "its transactional.id", _TXN_DENIED),
        _r(
            Op.IDEMPOTENT_WRITE,
            Res.CLUSTER,
            "the cluster, without a transactional.id",
            _CLUSTER_DENIED,
            _r(Op.WRITE, Res.TOPIC, "any one topic (Kafka 3+)"),
        ),
    ),
    24: (  # AddPartitionsToTxn
        _r(Op.WRITE, Res.TRANSACTIONAL_ID, "the transactional id (v0-3, clients)", _TXN_DENIED),
        _r(Op.WRITE, Res.TOPIC, "each topic (v0-3)", _TOPIC_DENIED),
        _r(Op.CLUSTER_ACTION, Res.CLUSTER, "the cluster (v4+, brokers)", _CLUSTER_DENIED),
    ),
    25: (  # AddOffsetsToTxn
        _r(Op.WRITE, Res.TRANSACTIONAL_ID, "the transactional id", _TXN_DENIED),
        _r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),
    ),
    26: (_r(Op.WRITE, Res.TRANSACTIONAL_ID, "the transactional id", _TXN_DENIED),),  # EndTxn
    27: (  # WriteTxnMarkers
        _r(Op.CLUSTER_ACTION, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED, _r(Op.ALTER, Res.CLUSTER, _CLUSTER)),
    ),
    28: (  # TxnOffsetCommit
        _r(Op.WRITE, Res.TRANSACTIONAL_ID, "the transactional id", _TXN_DENIED),
        _r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),
        _r(Op.READ, Res.TOPIC, "each topic", _TOPIC_DENIED),
    ),
    29: (_r(Op.DESCRIBE, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DescribeAcls
    30: (_r(Op.ALTER, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # CreateAcls
    31: (_r(Op.ALTER, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DeleteAcls
    32: (  # DescribeConfigs
        _r(Op.DESCRIBE_CONFIGS, Res.TOPIC, "each topic resource", _TOPIC_DENIED),
        _r(Op.DESCRIBE_CONFIGS, Res.CLUSTER, "the cluster, for broker resources", _CLUSTER_DENIED),
    ),
    33: (  # AlterConfigs
        _r(Op.ALTER_CONFIGS, Res.TOPIC, "each topic resource", _TOPIC_DENIED),
        _r(Op.ALTER_CONFIGS, Res.CLUSTER, "the cluster, for broker resources", _CLUSTER_DENIED),
    ),
    35: (_r(Op.DESCRIBE, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DescribeLogDirs
    36: (),  # SaslAuthenticate
    37: (_r(Op.ALTER, Res.TOPIC, "each topic", _TOPIC_DENIED),),  # CreatePartitions
    42: (_r(Op.DELETE, Res.GROUP, "each group", _GROUP_DENIED),),  # DeleteGroups
    43: (_r(Op.ALTER, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # ElectLeaders
    44: (  # IncrementalAlterConfigs
        _r(Op.ALTER_CONFIGS, Res.TOPIC, "each topic resource", _TOPIC_DENIED),
        _r(Op.ALTER_CONFIGS, Res.CLUSTER, "the cluster, for broker resources", _CLUSTER_DENIED),
    ),
    47: (  # OffsetDelete
        _r(Op.DELETE, Res.GROUP, "the group", _GROUP_DENIED),
        _r(Op.READ, Res.TOPIC, "each topic", _TOPIC_DENIED),
    ),
    48: (_r(Op.DESCRIBE_CONFIGS, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DescribeClientQuotas
    49: (_r(Op.ALTER_CONFIGS, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # AlterClientQuotas
    50: (_r(Op.DESCRIBE, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DescribeUserScramCredentials
    51: (_r(Op.ALTER, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # AlterUserScramCredentials
    55: (_r(Op.DESCRIBE, Res.CLUSTER, _CLUSTER, _CLUSTER_DENIED),),  # DescribeQuorum
    60: (),  # DescribeCluster: anyone; its authorized operations need DESCRIBE on the cluster
    61: (_r(Op.READ, Res.TOPIC, "each topic", _TOPIC_DENIED),),  # DescribeProducers
    65: (  # DescribeTransactions
        _r(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "each transactional id", _TXN_DENIED),
        _r(Op.DESCRIBE, Res.TOPIC, "each topic of a transaction (others are left out)", None),
    ),
    66: (_r(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "each transactional id listed", None),),  # ListTransactions
    68: (_r(Op.READ, Res.GROUP, "the group", _GROUP_DENIED),),  # ConsumerGroupHeartbeat
    69: (_r(Op.DESCRIBE, Res.GROUP, "each group", _GROUP_DENIED),),  # ConsumerGroupDescribe
}
