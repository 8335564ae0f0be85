"""A data dir written by the single-node onceflow (topics.json, meta.properties, producer-id-block.json)
opens on the metadata image: same cluster id, same topic ids and configs, the data still there, and
no producer id handed out twice; partition directories get Kafka's partition.metadata."""

from __future__ import annotations

import asyncio
import json

from tests.broker.raw_client import build_batch

from onceflow.broker.config import BrokerConfig
from onceflow.broker.topics import TopicManager
from onceflow.broker.txn.pid_manager import ProducerIdManager
from onceflow.protocol.records import validate_produce_records
from onceflow.server.migration import single_node_records
from onceflow.server.node import single_node


def _old_data_dir(path) -> tuple[str, dict[str, str]]:
    """What the single-node onceflow left: two topics with data, a producer-id block reserved."""
    topics = TopicManager(path)
    topics.load()
    orders = topics.create_topic("orders", 2, {"retention.ms": "3600000"})
    topics.create_topic("__consumer_offsets", 1)
    orders.partitions[1].append(validate_produce_records(bytearray(build_batch([b"a", b"b"]))))
    topics.flush()
    topics.close()
    ids = ProducerIdManager(path)
    assert ids.generate_producer_id() == 0  # reserves [0, 1000)
    return topics.cluster_id, {
        t["name"]: t["id"] for t in json.loads((path / "topics.json").read_text())["topics"]
    }


def test_the_old_files_become_bootstrap_records(tmp_path):
    _old_data_dir(tmp_path)
    records = single_node_records(tmp_path, node_id=0)
    kinds = [type(r).__name__ for r in records]
    assert kinds.count("TopicRecord") == 2 and kinds.count("PartitionRecord") == 3
    assert records[-1].next_producer_id == 1000
    assert single_node_records(tmp_path / "empty", node_id=0) == []


def test_a_single_node_data_dir_opens_with_its_topics_data_and_producer_ids(tmp_path):
    cluster_id, ids = _old_data_dir(tmp_path)

    async def scenario():
        node = single_node(BrokerConfig(port=0, data_dir=tmp_path))
        await node.start()
        try:
            image = node.metadata.image
            assert node.topics.cluster_id == cluster_id
            assert {name: str(image.topic(name).id) for name in ids} == ids
            assert dict(image.topic_config("orders")) == {"retention.ms": "3600000"}
            # old internal topics become compacted, as the single node did on load
            assert image.topic_config("__consumer_offsets")["cleanup.policy"] == "compact"
            assert node.topics.get_partition("orders", 1).log.log_end_offset == 2
            assert node.services.producer_ids.generate_producer_id() >= 1000
            marker = (tmp_path / "orders-1" / "partition.metadata").read_text()
            assert marker.startswith("version: 0\ntopic_id: ")
        finally:
            await node.stop()

    asyncio.run(scenario())
