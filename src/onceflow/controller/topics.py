"""Topics: CreateTopics (19), CreatePartitions (37), DeleteTopics (20) on the controller
(the topic half of Kafka's ``ReplicationControlManager``).

A new topic is a TopicRecord, its config overrides as ConfigRecords, then one PartitionRecord per
partition: replicas placed by :class:`~onceflow.controller.placement.StripedPlacer` over the active
brokers, ISR = those replicas, leader = the first one, both epochs 0. A manual assignment may name
any registered brokers; its ISR is the active ones among them (at least one). Errors are Kafka's, per
topic: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR
(above the active brokers), INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST (a name twice
in one request). ``validate_only`` answers the same and writes nothing.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from onceflow.controller.config import ControllerConfig
from onceflow.controller.placement import StripedPlacer
from onceflow.metadata.image import MetadataImage, PartitionRegistration
from onceflow.metadata.records import RESOURCE_TOPIC, ConfigRecord, RemoveTopicRecord, TopicRecord
from onceflow.protocol.errors import ErrorCode, KafkaError

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
SOURCE_TOPIC_CONFIG = 1

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs


def validate_topic_name(name: str | None) -> None:
    """Kafka's ``Topic.validate``: 1-249 characters of [a-zA-Z0-9._-], neither "." nor ".."."""
    if not name:
        raise KafkaError("Topic name is illegal, it can't be empty", ErrorCode.INVALID_TOPIC_EXCEPTION)
    if name in (".", ".."):
        raise KafkaError('Topic name cannot be "." or ".."', ErrorCode.INVALID_TOPIC_EXCEPTION)
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


def _collision_key(name: str) -> str:
    # "a.b" and "a_b" would collide in metric names: Kafka refuses the second.
    return name.replace(".", "_")


def _active_brokers(image: MetadataImage) -> list[tuple[int, str | None]]:
    return [(b.id, b.rack) for b in image.brokers.values() if b.active]


def _check_manual(image: MetadataImage, broker_ids, replication_factor: int | None) -> tuple[int, ...]:
    """A manual assignment's replicas, checked as Kafka does; its ISR is computed by the caller."""
    replicas = tuple(broker_ids)
    if not replicas:
        raise KafkaError(
            "The manual partition assignment includes an empty replica list.",
            ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
        )
    for broker_id, count in Counter(replicas).items():
        if image.broker(broker_id) is None:
            raise KafkaError(
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.",
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            )
        if count > 1:
            raise KafkaError(
                f"The manual partition assignment includes the broker {broker_id} more than once.",
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            )
    if replication_factor is not None and len(replicas) != replication_factor:
        raise KafkaError(
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {replication_factor} replica(s).",
            ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
        )
    return replicas


def _new_partition(image: MetadataImage, replicas: tuple[int, ...], what: str) -> PartitionRegistration:
    isr = tuple(b for b in replicas if image.is_active(b))
    if not isr:
        raise KafkaError(
            f"All brokers specified in the manual partition assignment for {what} are fenced or in controlled shutdown.",
            ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
        )
    return PartitionRegistration(replicas=replicas, isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0)


def _plan_topic(
    image: MetadataImage, config: ControllerConfig, topic, rng: random.Random
) -> list[PartitionRegistration]:
    if topic.assignments:
        if topic.replication_factor != -1:
            raise KafkaError(
                "A manual partition assignment was specified, but replication factor was not set to -1.",
                ErrorCode.INVALID_REQUEST,
            )
        if topic.num_partitions != -1:
            raise KafkaError(
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
                ErrorCode.INVALID_REQUEST,
            )
        by_index: dict[int, PartitionRegistration] = {}
        factor = None
        for assignment in topic.assignments:
            if assignment.partition_index in by_index:
                raise KafkaError(
                    f"Found multiple manual partition assignments for partition {assignment.partition_index}",
                    ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
                )
            replicas = _check_manual(image, assignment.broker_ids, factor)
            factor = len(replicas)
            by_index[assignment.partition_index] = _new_partition(
                image, replicas, f"partition {assignment.partition_index}"
            )
        if sorted(by_index) != list(range(len(by_index))):
            raise KafkaError(
                "partitions should be a consecutive 0-based integer sequence",
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            )
        return [by_index[i] for i in range(len(by_index))]
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(
            "Replication factor must be larger than 0, or -1 to use the default value.",
            ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(
            "Number of partitions was set to an invalid non-positive value.", ErrorCode.INVALID_PARTITIONS
        )
    count = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    factor = config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    placer = StripedPlacer(_active_brokers(image), rng)
    try:
        placements = placer.place_all(count, factor)
    except KafkaError as exc:
        raise KafkaError(
            f"Unable to replicate the partition {factor} time(s): {exc}", ErrorCode.INVALID_REPLICATION_FACTOR
        )
    return [
        PartitionRegistration(replicas=tuple(r), isr=tuple(r), leader=r[0], leader_epoch=0, partition_epoch=0)
        for r in placements
    ]


def _validate_configs(config: ControllerConfig, name: str, configs: dict[str, str | None]) -> None:
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        raise KafkaError(
            f"Null value not supported for topic configs: {', '.join(nulls)}", ErrorCode.INVALID_CONFIG
        )
    if config.config_validator is not None:
        problem = config.config_validator(RESOURCE_TOPIC, name, configs)
        if problem:
            raise KafkaError(problem, ErrorCode.INVALID_CONFIG)


def new_topic_id(image: MetadataImage, rng: random.Random) -> uuid.UUID:
    """A random topic id no topic has (nor the zero id, which Kafka reserves)."""
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        if topic_id.int != 0 and topic_id not in image.topics:
            return topic_id


def create_topics(
    image: MetadataImage, config: ControllerConfig, request: CreateTopicsRequest, rng: random.Random
) -> tuple[list, CreateTopicsResponse]:
    records: list = []
    results = []
    names = Counter(t.name for t in request.topics)
    taken = {_collision_key(n): n for n in image.topic_ids}
    for topic in request.topics:
        try:
            if names[topic.name] > 1:
                raise KafkaError(
                    f"Duplicate topic name {topic.name} in the request.", ErrorCode.INVALID_REQUEST
                )
            validate_topic_name(topic.name)
            if topic.name in image.topic_ids:
                raise KafkaError(f"Topic '{topic.name}' already exists.", ErrorCode.TOPIC_ALREADY_EXISTS)
            colliding = taken.get(_collision_key(topic.name))
            if colliding is not None:
                raise KafkaError(
                    f"Topic '{topic.name}' collides with existing topic: {colliding}",
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                )
            configs = {c.name: c.value for c in topic.configs}
            _validate_configs(config, topic.name, configs)
            partitions = _plan_topic(image, config, topic, rng)
        except KafkaError as exc:
            results.append(
                _Result(
                    name=topic.name,
                    topic_id=None,
                    error_code=int(exc.code),
                    error_message=str(exc),
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=[],
                )
            )
            continue
        topic_id = new_topic_id(image, rng)
        taken[_collision_key(topic.name)] = topic.name
        records.append(TopicRecord(name=topic.name, topic_id=topic_id))
        records.extend(
            ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name=topic.name, name=k, value=v)
            for k, v in sorted(configs.items())
        )
        records.extend(p.to_record(topic_id, i) for i, p in enumerate(partitions))
        results.append(
            _Result(
                name=topic.name,
                topic_id=topic_id,
                error_code=0,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=len(partitions),
                replication_factor=len(partitions[0].replicas),
                configs=[
                    _Config(
                        name=k,
                        value=v,
                        read_only=False,
                        config_source=SOURCE_TOPIC_CONFIG,
                        is_sensitive=False,
                    )
                    for k, v in sorted(configs.items())
                ],
            )
        )
    if getattr(request, "validate_only", False):
        records = []
    return records, CreateTopicsResponse(throttle_time_ms=0, topics=results)


_PResult = CreatePartitionsResponse.CreatePartitionsTopicResult


def _more_partitions(image: MetadataImage, topic, rng: random.Random) -> list:
    current = image.topic(topic.name)
    if current is None:
        raise KafkaError(f"Topic '{topic.name}' does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    have = len(current.partitions)
    if topic.count == have:
        raise KafkaError(f"Topic already has {have} partition(s).", ErrorCode.INVALID_PARTITIONS)
    if topic.count < have:
        raise KafkaError(
            f"The topic {topic.name} currently has {have} partition(s); {topic.count} would not be an increase.",
            ErrorCode.INVALID_PARTITIONS,
        )
    extra = topic.count - have
    factor = len(current.partitions[0].replicas)
    if topic.assignments is not None:
        if len(topic.assignments) != extra:
            raise KafkaError(
                f"Attempted to add {extra} additional partition(s), but only {len(topic.assignments)} assignment(s) were specified.",
                ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            )
        partitions = [
            _new_partition(image, _check_manual(image, a.broker_ids, factor), f"partition {have + i}")
            for i, a in enumerate(topic.assignments)
        ]
    else:
        try:
            placements = StripedPlacer(_active_brokers(image), rng).place_all(extra, factor)
        except KafkaError as exc:
            raise KafkaError(
                f"Unable to replicate the partition {factor} time(s): {exc}",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        partitions = [
            PartitionRegistration(
                replicas=tuple(r), isr=tuple(r), leader=r[0], leader_epoch=0, partition_epoch=0
            )
            for r in placements
        ]
    return [p.to_record(current.id, have + i) for i, p in enumerate(partitions)]


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, rng: random.Random
) -> tuple[list, CreatePartitionsResponse]:
    records: list = []
    results = []
    names = Counter(t.name for t in request.topics)
    for topic in request.topics:
        try:
            if names[topic.name] > 1:
                raise KafkaError(
                    f"Duplicate topic name {topic.name} in the request.", ErrorCode.INVALID_REQUEST
                )
            records.extend(_more_partitions(image, topic, rng))
        except KafkaError as exc:
            results.append(_PResult(name=topic.name, error_code=int(exc.code), error_message=str(exc)))
            continue
        results.append(_PResult(name=topic.name, error_code=0, error_message=None))
    if request.validate_only:
        records = []
    return records, CreatePartitionsResponse(throttle_time_ms=0, results=results)


_DResult = DeleteTopicsResponse.DeletableTopicResult


def delete_topics(
    image: MetadataImage, request: DeleteTopicsRequest, version: int
) -> tuple[list, DeleteTopicsResponse]:
    """DeleteTopics by name (v0-5) or by name or id (v6)."""
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    records: list = []
    results = []
    removed: set[uuid.UUID] = set()
    for name, topic_id in wanted:
        zero = topic_id is None or topic_id.int == 0
        if name is not None and zero:
            topic = image.topic(name)
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif name is None and not zero:
            topic = image.topic_by_id(topic_id)
            error = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            results.append(
                _DResult(
                    name=name,
                    topic_id=topic_id,
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message="Exactly one of a topic's name and id must be given.",
                )
            )
            continue
        if topic is None:
            results.append(_DResult(name=name, topic_id=topic_id, error_code=int(error), error_message=None))
            continue
        if topic.id not in removed:
            removed.add(topic.id)
            records.append(RemoveTopicRecord(topic_id=topic.id))
        results.append(_DResult(name=topic.name, topic_id=topic.id, error_code=0, error_message=None))
    return records, DeleteTopicsResponse(throttle_time_ms=0, responses=results)
