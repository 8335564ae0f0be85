"""TopicTransactionLog: the coordinator's appends to ``__transaction_state`` on real partition logs."""

import asyncio

from onceflow.broker.topics import TopicManager
from onceflow.broker.txn.config import TRANSACTION_STATE_TOPIC
from onceflow.broker.txn.service import TopicTransactionLog


def _manager(tmp_path):
    topics = TopicManager(tmp_path)
    topics.load()
    return topics


def test_appends_one_record_batch_per_call_and_reads_them_back(tmp_path):
    topics = _manager(tmp_path)
    txn_log = TopicTransactionLog(topics, 3)
    asyncio.run(txn_log.append(1, b"key-a", b"value-1"))
    asyncio.run(txn_log.append(1, b"key-a", b"value-2"))
    asyncio.run(txn_log.append(2, b"key-b", None))  # a tombstone
    topic = topics.get(TRANSACTION_STATE_TOPIC)
    assert topic is not None and topic.internal and len(topic.partitions) == 3
    assert topic.partitions[1].log.log_end_offset == 2
    assert list(txn_log.records()) == [(b"key-a", b"value-1"), (b"key-a", b"value-2"), (b"key-b", None)]
    topics.close()


def test_a_recreated_topic_is_written_not_the_deleted_one(tmp_path):
    topics = _manager(tmp_path)
    txn_log = TopicTransactionLog(topics, 2)
    asyncio.run(txn_log.append(0, b"k", b"old"))
    topics.delete_topic(TRANSACTION_STATE_TOPIC)
    asyncio.run(txn_log.append(0, b"k", b"new"))
    assert list(txn_log.records()) == [(b"k", b"new")]
    topics.close()
