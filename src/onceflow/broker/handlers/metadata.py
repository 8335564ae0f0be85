"""Metadata (3): the brokers, the cluster id, and topics with their partitions, from the metadata
image this broker has replayed: every partition's real leader, leader epoch, replicas and ISR, every
alive broker's endpoint on the listener the request came in on.

Unknown topics are auto-created when both the request allows it (``allow_auto_topic_creation``,
always allowed before v4) and ``auto.create.topics.enable`` is on, like Kafka: a CreateTopics sent on
to the active controller, answered once this broker has the topic; internal topics are never
auto-created here (their coordinators create them).

Authorization (Kafka's): a topic is in the answer only if the principal may DESCRIBE it. Listing all
topics leaves the others out; a topic asked for by name is TOPIC_AUTHORIZATION_FAILED (without
telling whether it exists), by id too (ids are not secret). Auto-creating needs CREATE on the cluster
or on the topic, else TOPIC_AUTHORIZATION_FAILED. Authorized operations (KIP-430) are the
authorizer's; the cluster's are 0 without DESCRIBE on the cluster.
"""

from __future__ import annotations

import logging

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from onceflow.broker import authorized_operations
from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import create_topics_now
from onceflow.broker.security.access import (
    CLUSTER,
    CREATE,
    DESCRIBE,
    TOPIC,
    allowed_names,
    authorize,
    operations,
)
from onceflow.broker.topics import validate_topic_name
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.internal_topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13
REQUEST = MetadataRequest

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition


def topic_metadata(ctx: RequestContext, topic) -> _Topic:
    """A topic of the image (``TopicImage``) as Metadata describes it."""
    image = ctx.metadata.image
    partitions = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        offline = [b for b in p.replicas if image.broker(b) is None or image.broker(b).fenced]
        leader_code = ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        partitions.append(
            _Partition(
                error_code=int(leader_code),
                partition_index=index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=offline,
            )
        )
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=partitions,
    )


def _error_topic(name: str | None, code: ErrorCode, topic_id=None) -> _Topic:
    return _Topic(error_code=int(code), name=name, topic_id=topic_id, is_internal=False, partitions=[])


async def _lookup_or_create(ctx: RequestContext, name: str, allow_auto_create: bool) -> _Topic:
    topic = ctx.metadata.image.topic(name)
    if topic is not None:
        return topic_metadata(ctx, topic)
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return _error_topic(name, error_code_for(exc))
    if not (allow_auto_create and ctx.config.auto_create_topics_enable) or name in INTERNAL_TOPICS:
        return _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not authorize(ctx, CREATE, CLUSTER, log_denied=False) and not authorize(ctx, CREATE, TOPIC, name):
        return _error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    code, _message = (await create_topics_now(ctx, [(name, -1, -1, {})]))[name]
    if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        return _error_topic(name, code)
    topic = ctx.metadata.image.topic(name)
    if topic is None:  # created, and not replayed here yet: the client asks again
        return _error_topic(name, ErrorCode.LEADER_NOT_AVAILABLE)
    if code is ErrorCode.NONE:
        log.info("auto-created topic %s for client %s", name, ctx.client_id)
    return topic_metadata(ctx, topic)


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    version = ctx.api_version
    image = ctx.metadata.image
    allow_auto_create = request.allow_auto_topic_creation if version >= 4 else True
    # v0: an empty list means all topics; v1+: null means all topics, empty means none.
    all_topics = request.topics is None or (version == 0 and not request.topics)
    if all_topics:
        listed = [
            t
            for t in sorted(image.topics.values(), key=lambda t: t.name)
            if not (t.name in INTERNAL_TOPICS and version == 0)
        ]
        described = allowed_names(ctx, DESCRIBE, TOPIC, (t.name for t in listed), log_denied=False)
        topics = [topic_metadata(ctx, t) for t in listed if described is None or t.name in described]
    else:
        topics = []
        by_id = {
            w.topic_id: image.topic_by_id(w.topic_id)
            for w in request.topics
            if w.name is None and w.topic_id is not None
        }
        names = [w.name for w in request.topics] + [t.name for t in by_id.values() if t is not None]
        described = allowed_names(ctx, DESCRIBE, TOPIC, names)
        for wanted in request.topics:
            if wanted.name is None and wanted.topic_id is not None:
                topic = by_id[wanted.topic_id]
                if topic is None:
                    topics.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
                elif described is not None and topic.name not in described:
                    topics.append(_error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, wanted.topic_id))
                else:
                    topics.append(topic_metadata(ctx, topic))
            elif described is not None and wanted.name not in described:
                topics.append(_error_topic(wanted.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                topics.append(await _lookup_or_create(ctx, wanted.name, allow_auto_create))
        image = ctx.metadata.image  # auto-creation may have brought a newer one
    if version >= 8 and request.include_topic_authorized_operations:
        # Every topic of the answer, unknown ones included, as Kafka fills them in.
        for topic_data in topics:
            topic_data.authorized_operations = authorized_operations.reported(
                operations(ctx, TOPIC, topic_data.name or ""), True
            )
    cluster_requested = 8 <= version <= 10 and bool(request.include_cluster_authorized_operations)
    cluster_operations = frozenset()
    if cluster_requested and authorize(ctx, DESCRIBE, CLUSTER):
        cluster_operations = operations(ctx, CLUSTER)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in image.alive_endpoints(ctx.listener)
        ],
        cluster_id=ctx.services.cluster_id,
        controller_id=ctx.metadata.controller_id(),
        topics=topics,
        # v8-10 (later versions ask DescribeCluster instead).
        authorized_operations=authorized_operations.reported(cluster_operations, cluster_requested),
        error_code=0,
    )
