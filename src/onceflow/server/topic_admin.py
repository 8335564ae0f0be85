"""Topic changes asked for from inside the broker (``TopicManager.create_topic`` and friends), made
by the controller.

The group and transaction coordinators create their internal topics on first use, synchronously,
from the middle of an append; tools and tests call ``TopicManager`` the same way. On a node those
calls must become controller decisions like any CreateTopics:

- :class:`LocalTopicAdmin` (a single node, whose quorum is its own and commits on demand): the
  controller decides, the records are committed and replayed at once, and the call returns with the
  topic in place;
- on a cluster node nothing can be committed synchronously: :class:`AsyncTopicAdmin` starts the
  request to the active controller and answers COORDINATOR_NOT_AVAILABLE for internal topics (the
  client retries; the topic is there by then), UNKNOWN_TOPIC_OR_PARTITION otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)

from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.metadata.records import RESOURCE_TOPIC
from onceflow.protocol.errors import ErrorCode, KafkaError, kafka_error

log = logging.getLogger(__name__)

_Topic = CreateTopicsRequest.CreatableTopic


def create_topics_request(name: str, partitions: int, configs: Mapping[str, str], replication_factor: int):
    return CreateTopicsRequest(
        topics=[
            _Topic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=[],
                configs=[_Topic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )


def _raise_for(code: int, message: str | None) -> None:
    if code != 0:
        raise kafka_error(code, message or ErrorCode(code).name)


class LocalTopicAdmin:
    """Topic changes through a single node's own controller, committed before the call returns."""

    def __init__(self, runner: Any, quorum: Any) -> None:
        self.runner = runner
        self.quorum = quorum

    def _run(self, api_key: int, version: int, request: Any) -> Any:
        from onceflow.server.controller_apis import operation_for
        from onceflow.server.quorum import now_ms

        controller = self.runner.controller
        if not controller.active:
            raise KafkaError("the controller is not active", ErrorCode.NOT_CONTROLLER)
        result = operation_for(controller, api_key, request, version)(now_ms())
        self.runner._append(result, controller.epoch)  # noqa: SLF001 - the runner's own append rule
        self.quorum.commit_now()
        return result.response

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> None:
        response = self._run(19, 7, create_topics_request(name, partitions, configs, 1))
        result = response.topics[0]
        _raise_for(result.error_code, result.error_message)

    def create_partitions(self, name: str, total: int) -> None:
        request = CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=total, assignments=None)],
            timeout_ms=30000,
            validate_only=False,
        )
        result = self._run(37, 3, request).results[0]
        _raise_for(result.error_code, result.error_message)

    def delete_topic(self, name: str) -> None:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=None)],
            topic_names=[name],
            timeout_ms=30000,
        )
        result = self._run(20, 6, request).responses[0]
        _raise_for(result.error_code, result.error_message)

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str]) -> None:
        resource = AlterConfigsRequest.AlterConfigsResource
        request = AlterConfigsRequest(
            resources=[
                resource(
                    resource_type=RESOURCE_TOPIC,
                    resource_name=name,
                    configs=[resource.AlterableConfig(name=k, value=v) for k, v in overrides.items()],
                )
            ],
            validate_only=False,
        )
        result = self._run(33, 2, request).responses[0]
        _raise_for(result.error_code, result.error_message)


class AsyncTopicAdmin:
    """Topic changes on a cluster node: sent to the active controller, not awaited."""

    def __init__(
        self,
        channel: Any,
        internal_configs: Mapping[str, Mapping[str, str]],
        replication_factors: Mapping[str, int] | None = None,
    ) -> None:
        self.channel = channel
        self.internal_configs = internal_configs
        # The internal topics' replication factors (offsets.topic.replication.factor, ...); others 1.
        self.replication_factors = dict(replication_factors or {})
        self._creating: set[str] = set()

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> None:
        if name not in self._creating:
            self._creating.add(name)
            request = create_topics_request(
                name,
                partitions,
                {**self.internal_configs.get(name, {}), **configs},
                self.replication_factors.get(name, 1),
            )
            task = asyncio.get_running_loop().create_task(self.channel.send(19, 7, request))
            task.add_done_callback(lambda t, n=name: self._done(n, t))
        if name in INTERNAL_TOPICS:
            raise KafkaError(f"{name} is being created", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        raise KafkaError(f"topic {name} is being created", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def _done(self, name: str, task: asyncio.Task) -> None:
        self._creating.discard(name)
        if not task.cancelled() and task.exception() is not None:
            log.warning("creating %s failed: %s", name, task.exception())

    def _refuse(self, what: str) -> None:
        raise KafkaError(
            f"{what} goes through the controller: send the admin request", ErrorCode.INVALID_REQUEST
        )

    def create_partitions(self, name: str, total: int) -> None:
        self._refuse("CreatePartitions")

    def delete_topic(self, name: str) -> None:
        self._refuse("DeleteTopics")

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str]) -> None:
        self._refuse("AlterConfigs")
