"""Metadata (3): brokers (just us), the cluster id, and topics with their partitions.

Unknown topics are auto-created when both the request allows it (``allow_auto_topic_creation``,
always allowed before v4) and ``auto.create.topics.enable`` is on, like Kafka; internal topics are
never auto-created here (their coordinators create them).
"""

from __future__ import annotations

import logging

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from onceflow.broker import authorized_operations
from onceflow.broker.context import RequestContext
from onceflow.broker.topics import Topic, validate_topic_name
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.internal_topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13
REQUEST = MetadataRequest

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition


def topic_metadata(ctx: RequestContext, topic: Topic) -> _Topic:
    node = ctx.config.node_id
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=[
            _Partition(
                error_code=0,
                partition_index=p.index,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for p in topic.partitions
        ],
    )


def _error_topic(name: str | None, code: ErrorCode, topic_id=None) -> _Topic:
    return _Topic(error_code=int(code), name=name, topic_id=topic_id, is_internal=False, partitions=[])


def _lookup_or_create(ctx: RequestContext, name: str, allow_auto_create: bool) -> _Topic:
    topic = ctx.topics.get(name)
    if topic is not None:
        return topic_metadata(ctx, topic)
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return _error_topic(name, error_code_for(exc))
    if not (allow_auto_create and ctx.config.auto_create_topics_enable) or name in INTERNAL_TOPICS:
        return _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        topic = ctx.topics.create_topic(name, ctx.config.num_partitions)
    except KafkaError as exc:
        return _error_topic(name, error_code_for(exc))
    log.info("auto-created topic %s for client %s", name, ctx.client_id)
    return topic_metadata(ctx, topic)


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    version = ctx.api_version
    allow_auto_create = request.allow_auto_topic_creation if version >= 4 else True
    # v0: an empty list means all topics; v1+: null means all topics, empty means none.
    all_topics = request.topics is None or (version == 0 and not request.topics)
    if all_topics:
        topics = [topic_metadata(ctx, t) for t in ctx.topics if not (t.internal and version == 0)]
    else:
        topics = []
        for wanted in request.topics:
            if wanted.name is None and wanted.topic_id is not None:
                topic = ctx.topics.get_by_id(wanted.topic_id)
                if topic is None:
                    topics.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
                else:
                    topics.append(topic_metadata(ctx, topic))
            else:
                topics.append(_lookup_or_create(ctx, wanted.name, allow_auto_create))
    if version >= 8 and request.include_topic_authorized_operations:
        # Every topic of the answer, unknown ones included, as Kafka fills them in.
        for topic_data in topics:
            topic_data.authorized_operations = authorized_operations.reported(
                authorized_operations.TOPIC, True
            )
    services = ctx.services
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=ctx.config.node_id,
                host=services.advertised_host,
                port=services.advertised_port,
                rack=None,
            )
        ],
        cluster_id=services.cluster_id,
        controller_id=ctx.config.node_id,
        topics=topics,
        # v8-10 (later versions ask DescribeCluster instead).
        authorized_operations=authorized_operations.reported(
            authorized_operations.CLUSTER,
            8 <= version <= 10 and bool(request.include_cluster_authorized_operations),
        ),
        error_code=0,
    )
