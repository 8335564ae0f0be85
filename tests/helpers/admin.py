"""Admin adapters over the three clients' admin APIs: create, describe, describe configs, delete.

Each adapter's calls are blocking and return plain values: ``partitions(topic)`` is the partition
count seen in metadata (None when the topic is absent), ``configs(topic)`` maps config names to
their string values.
"""

from __future__ import annotations

import asyncio

ADMIN_CLIENTS = ("confluent", "kafka-python", "aiokafka")


def admin_adapter(name: str, bootstrap: str):
    return {"confluent": ConfluentAdmin, "kafka-python": KafkaPythonAdmin, "aiokafka": AIOKafkaAdmin}[name](
        bootstrap
    )


class ConfluentAdmin:
    def __init__(self, bootstrap: str):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs)],
            request_timeout=15,
        )
        futures[topic].result(timeout=30)

    def partitions(self, topic: str) -> int | None:
        meta = self.admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        return len(meta.partitions)

    def topic_names(self) -> set[str]:
        return set(self.admin.list_topics(timeout=10).topics)

    def configs(self, topic: str) -> dict[str, str | None]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=30)
        return {name: entry.value for name, entry in entries.items()}

    def delete(self, topic: str) -> None:
        self.admin.delete_topics([topic], request_timeout=15)[topic].result(timeout=30)

    def close(self) -> None:
        pass


class KafkaPythonAdmin:
    def __init__(self, bootstrap: str):
        from kafka import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)

    def create(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        self.admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1, "configs": configs}}
        )

    def partitions(self, topic: str) -> int | None:
        try:
            (meta,) = self.admin.describe_topics([topic])
        except Exception:  # kafka-python raises UnknownTopicOrPartitionError for absent topics
            return None
        if meta["error_code"] != 0:
            return None
        return len(meta["partitions"])

    def topic_names(self) -> set[str]:
        return set(self.admin.list_topics())

    def configs(self, topic: str) -> dict[str, str | None]:
        from kafka.admin import ConfigResource, ConfigResourceType

        result = self.admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        return {name: data["value"] for name, data in result["topic"][topic].items()}

    def delete(self, topic: str) -> None:
        self.admin.delete_topics([topic])

    def close(self) -> None:
        self.admin.close()


class AIOKafkaAdmin:
    """aiokafka's admin is async; each call runs in its own short event loop."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def _run(self, action):
        async def main():
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
            await admin.start()
            try:
                return await action(admin)
            finally:
                await admin.close()

        return asyncio.run(main())

    def create(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        from aiokafka.admin import NewTopic

        async def action(admin):
            response = await admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=1, topic_configs=configs)]
            )
            _raise_topic_errors(response)

        self._run(action)

    def partitions(self, topic: str) -> int | None:
        async def action(admin):
            (meta,) = await admin.describe_topics([topic])
            return None if meta["error_code"] != 0 else len(meta["partitions"])

        return self._run(action)

    def topic_names(self) -> set[str]:
        async def action(admin):
            return set(await admin.list_topics())

        return self._run(action)

    def configs(self, topic: str) -> dict[str, str | None]:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        async def action(admin):
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            out: dict[str, str | None] = {}
            for response in responses:
                for resource in response.to_object()["resources"]:
                    if resource["error_code"] != 0:
                        raise RuntimeError(f"DescribeConfigs error {resource['error_code']} for {topic}")
                    for entry in resource["config_entries"]:
                        out[entry["config_names"]] = entry["config_value"]
            return out

        return self._run(action)

    def delete(self, topic: str) -> None:
        async def action(admin):
            _raise_topic_errors(await admin.delete_topics([topic]))

        self._run(action)

    def close(self) -> None:
        pass


def _raise_topic_errors(response) -> None:
    """aiokafka returns raw responses; a non-zero per-topic error code becomes an exception."""
    obj = response.to_object()
    for topic in obj.get("topics", obj.get("topic_errors", [])):
        code = topic.get("error_code", 0)
        if code:
            raise RuntimeError(f"topic {topic.get('topic') or topic.get('name')}: error code {code}")
