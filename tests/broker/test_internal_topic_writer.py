"""The one internal-topic adapter (``coordinator.internal_topic.InternalTopicWriter``): the coordinator
runtime's appends to ``__transaction_state`` and ``__consumer_offsets`` on real partition logs, read
back as loading reads them, with the partition's high watermark passed on."""

from onceflow.broker.coordinator.internal_topic import InternalTopicWriter
from onceflow.broker.coordinator.records import StoredBatch, marker_batch
from onceflow.broker.topics import TopicManager
from onceflow.protocol.internal_topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC


def _manager(tmp_path):
    topics = TopicManager(tmp_path)
    topics.load()
    return topics


def test_appends_one_record_batch_per_call_and_reads_them_back(tmp_path):
    topics = _manager(tmp_path)
    writer = InternalTopicWriter(topics, TRANSACTION_STATE_TOPIC, 3)
    heard = []
    writer.set_high_watermark_listener(lambda partition, hw: heard.append((partition, hw)))
    assert writer.append(1, StoredBatch(((b"key-a", b"value-1"),))) == 1
    assert writer.append(1, StoredBatch(((b"key-a", b"value-2"),))) == 2
    assert writer.append(2, StoredBatch(((b"key-b", None),))) == 1  # a tombstone
    topic = topics.get(TRANSACTION_STATE_TOPIC)
    assert topic is not None and topic.internal and len(topic.partitions) == 3
    assert [b.records for b in writer.read(1)] == [((b"key-a", b"value-1"),), ((b"key-a", b"value-2"),)]
    assert [b.records for b in writer.read(2)] == [((b"key-b", None),)]
    assert writer.log_end_offset(1) == writer.high_watermark(1) == 2
    assert heard == [(1, 1), (1, 2), (2, 1)]  # one replica: committed by each append
    topics.close()


def test_a_recreated_topic_is_written_not_the_deleted_one(tmp_path):
    topics = _manager(tmp_path)
    writer = InternalTopicWriter(topics, TRANSACTION_STATE_TOPIC, 2)
    writer.append(0, StoredBatch(((b"k", b"old"),)))
    topics.delete_topic(TRANSACTION_STATE_TOPIC)
    assert list(writer.read(0)) == []
    writer.append(0, StoredBatch(((b"k", b"new"),)))
    assert [b.records for b in writer.read(0)] == [((b"k", b"new"),)]
    topics.close()


def test_transactional_batches_and_markers_keep_their_header(tmp_path):
    topics = _manager(tmp_path)
    writer = InternalTopicWriter(topics, CONSUMER_OFFSETS_TOPIC, 2)
    records = ((b"offset-key-1", b"v1"), (b"offset-key-2", b"v2"))
    writer.append(0, StoredBatch(records, producer_id=7, producer_epoch=3, transactional=True))
    writer.append(0, marker_batch(7, 3, commit=True, coordinator_epoch=5))
    data, marker = writer.read(0)
    assert (data.records, data.producer_id, data.producer_epoch, data.transactional) == (records, 7, 3, True)
    assert (marker.control, marker.commit, marker.coordinator_epoch, marker.producer_id) == (True, True, 5, 7)
    topics.close()


def test_an_existing_topic_keeps_its_partition_count(tmp_path):
    topics = _manager(tmp_path)
    topics.create_topic(CONSUMER_OFFSETS_TOPIC, 4, internal=True)
    assert InternalTopicWriter(topics, CONSUMER_OFFSETS_TOPIC, 10).num_partitions == 4
    topics.close()
