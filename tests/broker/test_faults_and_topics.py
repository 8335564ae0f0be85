"""Unit tests: fault points and the TopicManager without a server."""

from __future__ import annotations

import json
import logging

import pytest

from onceflow.broker.faults import DELAY_RESPONSE, DROP_RESPONSE_AFTER_APPEND, Faults
from onceflow.broker.topics import TopicManager, validate_topic_name
from onceflow.protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)


def test_faults_are_off_by_default_and_follow_their_probability():
    faults = Faults(seed=1)
    assert not any(faults.fire(DROP_RESPONSE_AFTER_APPEND) for _ in range(100))
    faults.set(DROP_RESPONSE_AFTER_APPEND, 1.0)
    assert all(faults.fire(DROP_RESPONSE_AFTER_APPEND) for _ in range(100))
    faults.set(DROP_RESPONSE_AFTER_APPEND, 0.5)
    fired = sum(faults.fire(DROP_RESPONSE_AFTER_APPEND) for _ in range(1000))
    assert 300 < fired < 700
    faults.clear()
    assert not faults.fire(DROP_RESPONSE_AFTER_APPEND)


def test_faults_from_config_and_bad_settings():
    faults = Faults({DELAY_RESPONSE: 1.0, "delay-response.ms": 250})
    assert faults.fire(DELAY_RESPONSE) and faults.delay_response_s == 0.25
    with pytest.raises(ValueError, match="unknown fault point"):
        Faults({"no-such-fault": 0.1})
    with pytest.raises(ValueError, match="within 0..1"):
        Faults({DELAY_RESPONSE: 2})


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "a/b", "é", "a\x00"])
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


def test_valid_topic_names():
    for name in ("a", "A-b_c.d", "x" * 249, "__consumer_offsets"):
        validate_topic_name(name)


def test_topic_manager_lifecycle_and_persistence(tmp_path):
    topics = TopicManager(tmp_path)
    topics.load()
    created = topics.create_topic("t", 2, {"retention.ms": "100"})
    assert [p.index for p in created.partitions] == [0, 1]
    assert topics.get_by_id(created.topic_id) is created
    with pytest.raises(TopicAlreadyExists):
        topics.create_topic("t", 1)
    topics.create_topic("a.b", 1)
    with pytest.raises(InvalidTopic, match="collides"):
        topics.create_topic("a_b", 1)
    with pytest.raises(InvalidConfig):
        topics.create_topic("u", 1, {"retention.ms": "never"})
    with pytest.raises(InvalidPartitions):
        topics.create_partitions("t", 2)
    with pytest.raises(UnknownTopicOrPartition):
        topics.get_partition("t", 2)
    topics.create_partitions("t", 3)
    internal = topics.create_topic("__consumer_offsets", 1)
    assert internal.internal
    doc = json.loads((tmp_path / "topics.json").read_text())
    assert {t["name"]: t["partitions"] for t in doc["topics"]} == {"t": 3, "a.b": 1, "__consumer_offsets": 1}
    assert not list(tmp_path.glob("*.tmp"))
    topics.close()

    reloaded = TopicManager(tmp_path)
    reloaded.load()
    assert reloaded.cluster_id == topics.cluster_id
    again = reloaded.get("t")
    assert (again.topic_id, again.configs, len(again.partitions)) == (
        created.topic_id,
        {"retention.ms": "100"},
        3,
    )
    assert reloaded.get("__consumer_offsets").internal
    reloaded.close()


def test_a_restart_logs_one_info_line_for_its_partitions(tmp_path, caplog):
    topics = TopicManager(tmp_path)
    topics.load()
    topics.create_topic("t", 3)
    topics.close()
    topics = TopicManager(tmp_path)
    topics.load()
    topics.get("t").partitions[0].log.abandon()  # as a kill leaves it
    topics.get("t").partitions[1].log.close()
    topics.get("t").partitions[2].log.close()
    caplog.set_level(logging.INFO)
    reloaded = TopicManager(tmp_path)
    reloaded.load()
    reloaded.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "loaded 3 partition(s) (1 topics from" in lines[0]
    assert lines[0].endswith("1 recovered after an unclean shutdown: t-0")


def test_leftover_partition_dir_does_not_leak_into_a_new_topic(tmp_path):
    topics = TopicManager(tmp_path)
    topics.load()
    first = topics.create_topic("t", 1)
    from onceflow.protocol.records import validate_produce_records

    from .raw_client import build_batch

    first.partitions[0].append(validate_produce_records(bytearray(build_batch([b"old"]))))
    topics.close()
    # Simulate a deletion interrupted after the metadata was written: the directory remains.
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": []}))
    topics = TopicManager(tmp_path)
    topics.load()
    fresh = topics.create_topic("t", 1)
    assert fresh.partitions[0].log.log_end_offset == 0
    topics.close()
