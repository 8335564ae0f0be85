"""CreateTopics (19): new topics with a partition count, replication factor and config overrides, or
a dry run; decided by the active controller (``broker.forwarding``), which places the partitions over
the live brokers.

Checked here first: a request that would make more than 10,000 partitions in all is refused as a
whole (POLICY_VIOLATION for each of its topics), as Kafka's controller does; and while partitions
are not replicated (``replication_support``), a user topic may have only one replica
(INVALID_REPLICATION_FACTOR saying so). A created topic is answered once this broker has it, with
its configs as DescribeConfigs would give them (v5+).

Authorization (Kafka's, checked here before anything goes on): CREATE on the cluster, else CREATE on
each topic (TOPIC_AUTHORIZATION_FAILED for the others); a created topic's configs are in the answer
only with DESCRIBE_CONFIGS on it (else its config error is TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.replication_support import replication_factor_refusal
from onceflow.broker.security.access import CLUSTER, CREATE, DESCRIBE_CONFIGS, TOPIC, allowed_names, authorize
from onceflow.broker.topic_configs import describe_topic_configs
from onceflow.broker.topics import MAX_PARTITIONS_PER_REQUEST
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

log = logging.getLogger(__name__)

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7
REQUEST = CreateTopicsRequest

DELETE_TOPICS_KEY, DELETE_TOPICS_VERSION = 20, 6

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs


def _requested_partitions(ctx: RequestContext, topic) -> int:
    """Partitions a topic of the request asks for, as Kafka counts them against the limit: its
    assignments, else its count (-1: num.partitions); a count below 1 makes none."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return ctx.config.num_partitions
    return max(topic.num_partitions, 0)


def _failed(name: str, code: ErrorCode, message: str | None) -> _Result:
    return _Result(
        name=name,
        topic_id=None,
        error_code=int(code),
        error_message=message,
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )


def _with_described_configs(ctx: RequestContext, result, overrides: dict[str, str | None]) -> None:
    result.configs = [
        _Config(name=c.name, value=c.value, read_only=c.read_only, config_source=c.source, is_sensitive=False)
        for c in describe_topic_configs({k: v for k, v in overrides.items() if v is not None}, ctx.config)
    ]


def _without_configs(result) -> None:
    """A created topic whose configs the principal may not see (no DESCRIBE_CONFIGS on it)."""
    result.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    result.num_partitions = -1
    result.replication_factor = -1
    result.configs = []


async def _undo_if_unopened(ctx: RequestContext, topic, answers: dict) -> None:
    """A created topic whose logs this broker could not open (no descriptor or disk space left) is
    deleted again and answered KAFKA_STORAGE_ERROR: nothing half-made stays behind."""
    failures = ctx.topics.open_failures(topic.name)
    if not failures:
        return
    request = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=topic.name, topic_id=None)],
        topic_names=[topic.name],
        timeout_ms=30000,
    )
    try:
        await forward(ctx, request, DELETE_TOPICS_KEY, DELETE_TOPICS_VERSION)
        await wait_visible(ctx, lambda image: image.topic(topic.name) is None)
    except KafkaError as exc:
        log.warning("could not delete %s again after failing to open it: %s", topic.name, exc)
    answers[id(topic)] = _failed(topic.name, ErrorCode.KAFKA_STORAGE_ERROR, failures[0])


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    total = sum(_requested_partitions(ctx, topic) for topic in request.topics)
    if total > MAX_PARTITIONS_PER_REQUEST:
        message = (
            f"the request asks for {total} partitions in all; one request may create at most "
            f"{MAX_PARTITIONS_PER_REQUEST}: create the topics in several requests"
        )
        return CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[_failed(topic.name, ErrorCode.POLICY_VIOLATION, message) for topic in request.topics],
        )
    original = list(request.topics)
    names = [t.name for t in original]
    creatable = (
        None
        if authorize(ctx, CREATE, CLUSTER, log_denied=False)
        else allowed_names(ctx, CREATE, TOPIC, names)
    )
    describable = allowed_names(ctx, DESCRIBE_CONFIGS, TOPIC, names, log_denied=False)
    refused = {}
    for topic in original:
        if creatable is not None and topic.name not in creatable:
            refused[id(topic)] = _failed(
                topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            )
            continue
        message = replication_factor_refusal(ctx, topic)
        if message is not None:
            refused[id(topic)] = _failed(topic.name, ErrorCode.INVALID_REPLICATION_FACTOR, message)
    forwarded = [topic for topic in original if id(topic) not in refused]
    answers: dict[int, object] = {}
    if forwarded:
        request.topics = forwarded
        try:
            response = await forward(ctx, request)
        except KafkaError as exc:
            answers = {id(t): _failed(t.name, error_code_for(exc), str(exc)) for t in forwarded}
        else:
            # The controller answers each topic in request order (a repeated name gets two answers).
            answers = {id(t): result for t, result in zip(forwarded, response.topics, strict=False)}
    created = [
        t.name
        for t in forwarded
        if id(t) in answers and answers[id(t)].error_code == 0 and not request.validate_only
    ]
    if created:
        await wait_visible(ctx, lambda image: all(image.topic(name) is not None for name in created))
        for topic in forwarded:
            if topic.name in created:
                await _undo_if_unopened(ctx, topic, answers)
    results = []
    for topic in original:
        result = refused.get(id(topic)) or answers.get(id(topic))
        if result is None:
            continue
        if result.error_code == 0 and describable is not None and topic.name not in describable:
            _without_configs(result)
        elif result.error_code == 0 and ctx.api_version >= 5:
            _with_described_configs(ctx, result, {c.name: c.value for c in topic.configs})
        results.append(result)
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
