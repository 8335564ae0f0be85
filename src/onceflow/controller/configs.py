"""Configs: IncrementalAlterConfigs (44) and AlterConfigs (33) as ConfigRecords (Kafka's
``ConfigurationControlManager``).

Resources: a topic (it must exist), or brokers (name "" is the cluster-wide default, a number one
broker). A change writes one ConfigRecord per key whose value changes (null deletes the key); broker
keys are written even when unchanged, as Kafka does (KAFKA-14136), so brokers reload them. What a
value may be is not the controller's business: the ``config_validator`` of
:class:`~onceflow.controller.config.ControllerConfig` sees each resource's configs after the change
and may refuse them (INVALID_CONFIG). Legacy AlterConfigs replaces a resource's configs as a whole:
keys it leaves out are deleted.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from onceflow.controller.config import ControllerConfig
from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import RESOURCE_BROKER, RESOURCE_TOPIC, ConfigRecord
from onceflow.protocol.errors import ErrorCode, KafkaError

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
# Keys whose values are comma-separated lists (APPEND / SUBTRACT apply to them only).
LIST_CONFIGS = {
    RESOURCE_TOPIC: frozenset(
        {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
    ),
    RESOURCE_BROKER: frozenset({"log.cleanup.policy", "listeners", "advertised.listeners", "log.dirs"}),
}


def _check_resource(image: MetadataImage, resource_type: int, name: str) -> None:
    if resource_type == RESOURCE_TOPIC:
        if image.topic(name) is None:
            raise KafkaError(f"Topic {name!r} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    elif resource_type == RESOURCE_BROKER:
        if name and not name.lstrip("-").isdigit():
            raise KafkaError(
                f'Invalid broker name {name!r}: a broker resource is "" or a node id.',
                ErrorCode.INVALID_REQUEST,
            )
    else:
        raise KafkaError(
            f"Unsupported resource type {resource_type} for the controller", ErrorCode.INVALID_REQUEST
        )


def _resource_records(
    image: MetadataImage,
    config: ControllerConfig,
    resource_type: int,
    name: str,
    new_values: Callable[[dict[str, str]], dict[str, str | None]],
) -> list[ConfigRecord]:
    """Records taking one resource from its current configs to ``new_values(current)`` (a key
    mapped to None is deleted), validated."""
    _check_resource(image, resource_type, name)
    current = dict(image.config(resource_type, name))
    changes = new_values(current)
    records = [
        ConfigRecord(resource_type=resource_type, resource_name=name, name=key, value=value)
        for key, value in changes.items()
        if current.get(key) != value or resource_type == RESOURCE_BROKER
    ]
    after = dict(current)
    for key, value in changes.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    if config.config_validator is not None:
        problem = config.config_validator(resource_type, name, after)
        if problem:
            raise KafkaError(problem, ErrorCode.INVALID_CONFIG)
    return records


def _incremental(resource_type: int, operations) -> Callable[[dict[str, str]], dict[str, str | None]]:
    def new_values(current: dict[str, str]) -> dict[str, str | None]:
        changes: dict[str, str | None] = {}
        for entry in operations:
            key, op, value = entry.name, entry.config_operation, entry.value
            old = changes.get(key, current.get(key))
            if op == OP_SET:
                changes[key] = value
            elif op == OP_DELETE:
                changes[key] = None
            elif op in (OP_APPEND, OP_SUBTRACT):
                if key not in LIST_CONFIGS.get(resource_type, ()):
                    name = "APPEND" if op == OP_APPEND else "SUBTRACT"
                    raise KafkaError(
                        f"Can't {name} to key {key} because its type is not LIST.", ErrorCode.INVALID_CONFIG
                    )
                parts = [p for p in (old or "").split(",") if p]
                for item in (value or "").split(","):
                    if op == OP_APPEND and item and item not in parts:
                        parts.append(item)
                    elif op == OP_SUBTRACT and item in parts:
                        parts.remove(item)
                changes[key] = ",".join(parts)
            else:
                raise KafkaError(f"Unknown config operation {op} for key {key}", ErrorCode.INVALID_REQUEST)
        return changes

    return new_values


def incremental_alter_configs(
    image: MetadataImage, config: ControllerConfig, request: IncrementalAlterConfigsRequest
) -> tuple[list, IncrementalAlterConfigsResponse]:
    records: list = []
    answers = []
    for resource in request.resources:
        try:
            keys = [c.name for c in resource.configs]
            if len(set(keys)) != len(keys):
                raise KafkaError(
                    "A config key appears more than once for one resource.", ErrorCode.INVALID_REQUEST
                )
            records.extend(
                _resource_records(
                    image,
                    config,
                    resource.resource_type,
                    resource.resource_name,
                    _incremental(resource.resource_type, resource.configs),
                )
            )
            code, message = 0, None
        except KafkaError as exc:
            code, message = int(exc.code), str(exc)
        answers.append(
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    if request.validate_only:
        records = []
    return records, IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=answers)


def alter_configs(
    image: MetadataImage, config: ControllerConfig, request: AlterConfigsRequest
) -> tuple[list, AlterConfigsResponse]:
    records: list = []
    answers = []
    for resource in request.resources:
        wanted = {c.name: c.value for c in resource.configs}

        def new_values(current: dict[str, str], wanted=wanted) -> dict[str, str | None]:
            changes: dict[str, str | None] = dict(wanted)
            changes.update({key: None for key in current if key not in wanted})
            return changes

        try:
            records.extend(
                _resource_records(image, config, resource.resource_type, resource.resource_name, new_values)
            )
            code, message = 0, None
        except KafkaError as exc:
            code, message = int(exc.code), str(exc)
        answers.append(
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    if request.validate_only:
        records = []
    return records, AlterConfigsResponse(throttle_time_ms=0, responses=answers)
