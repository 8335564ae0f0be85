"""FindCoordinator (10): the broker coordinating a group or a transactional id.

A group's coordinator is the leader of its ``__consumer_offsets`` partition, a transactional id's the
leader of its ``__transaction_state`` partition (Kafka's ``abs(hash) % partitions``), as the metadata
image says, with that broker's endpoint on the listener the request came in on. If the internal topic
does not exist yet it is created first (through the active controller, with
``offsets.topic.replication.factor`` / ``transaction.state.log.replication.factor`` replicas and the
transaction log's ``transaction.state.log.min.isr``), as Kafka's broker does on the first
FindCoordinator; while the cluster has fewer live brokers than that, or a partition has no leader
right now, the answer is COORDINATOR_NOT_AVAILABLE (the client asks again).

v0-3 ask for one key; v4+ batch them (``coordinator_keys``, KIP-699). Key type 0 is a group,
1 a transactional id; anything else is INVALID_REQUEST. A group key needs DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.coordinator.partitioning import partition_for_key
from onceflow.broker.forwarding import create_topics_now
from onceflow.broker.group.config import GroupCoordinatorConfig
from onceflow.broker.security.access import DESCRIBE, GROUP, TRANSACTIONAL_ID, authorize
from onceflow.broker.topics import INTERNAL_TOPIC_CONFIGS
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6
REQUEST = FindCoordinatorRequest

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

_Coordinator = FindCoordinatorResponse.Coordinator


def _refusal(ctx: RequestContext, key_type: int, key: str | None) -> ErrorCode | None:
    """Kafka's check, before anything is located or created: DESCRIBE on the group or id."""
    if key_type == GROUP_KEY_TYPE and not authorize(ctx, DESCRIBE, GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if key_type == TRANSACTION_KEY_TYPE and not authorize(ctx, DESCRIBE, TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return None


def _topic_for(ctx: RequestContext, key_type: int) -> tuple[str, int, int, dict[str, str]]:
    """(internal topic, partitions and replication factor it is created with, its configs) of a key
    type."""
    config = ctx.config
    if key_type == GROUP_KEY_TYPE:
        # The group coordinator's offsets.topic.num.partitions: it hashes groups onto that count.
        # __consumer_offsets takes the broker's min.insync.replicas, as in Kafka.
        segment = str(config.offsets_topic_segment_bytes)
        return (
            CONSUMER_OFFSETS_TOPIC,
            GroupCoordinatorConfig().offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            {**INTERNAL_TOPIC_CONFIGS, "segment.bytes": segment},
        )
    segment = str(config.transaction_state_log_segment_bytes)
    return (
        TRANSACTION_STATE_TOPIC,
        config.transaction_state_log_num_partitions,
        config.transaction_state_log_replication_factor,
        {
            **INTERNAL_TOPIC_CONFIGS,
            "segment.bytes": segment,
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
        },
    )


async def _ensure_topic(ctx: RequestContext, key_type: int) -> ErrorCode:
    name, partitions, factor, configs = _topic_for(ctx, key_type)
    if ctx.metadata.image.topic(name) is not None:
        return ErrorCode.NONE
    code, _message = (await create_topics_now(ctx, [(name, partitions, factor, configs)]))[name]
    if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return (
        ErrorCode.NONE if ctx.metadata.image.topic(name) is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
    )


def _locate(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
    none = (-1, "", -1)
    refused = _refusal(ctx, key_type, key)
    if refused is not None:
        return refused, None, none
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", none
    name, *_spec = _topic_for(ctx, key_type)
    image = ctx.metadata.image
    topic = image.topic(name)
    if topic is None or not topic.partitions:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} does not exist yet", none
    partition = partition_for_key(key or "", len(topic.partitions))
    found = image.leader_endpoint(name, partition, ctx.listener)
    if found is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name}-{partition} has no leader right now", none
    return ErrorCode.NONE, None, found


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.api_version >= 1 else GROUP_KEY_TYPE
    keys = (request.coordinator_keys or []) if ctx.api_version >= 4 else [request.key]
    if key_type in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) and any(
        _refusal(ctx, key_type, key) is None for key in keys
    ):
        await _ensure_topic(ctx, key_type)  # only for a key the asker may see
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys or []:
            error, message, (node, host, port) = _locate(ctx, key_type, key)
            coordinators.append(
                _Coordinator(
                    key=key, node_id=node, host=host, port=port, error_code=int(error), error_message=message
                )
            )
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    error, message, (node, host, port) = _locate(ctx, key_type, request.key)
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=int(error), error_message=message, node_id=node, host=host, port=port
    )
