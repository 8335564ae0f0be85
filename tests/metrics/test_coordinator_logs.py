"""The coordinators' events counted from their logs (``broker/metrics/coordinator_logs``), on real
partition logs written as the coordinators write them: offset commits (transactional ones only once
committed), rebalances (new generations and group epochs), transactions committed and aborted and
their commit times; counting starts where the logs ended at ``start``."""

from __future__ import annotations

from onceflow.broker.group import consumer_group_records as cg
from onceflow.broker.group import log_format as gf
from onceflow.broker.metrics.coordinator_logs import CoordinatorLogs
from onceflow.broker.metrics.families import Families
from onceflow.broker.topics import TopicManager
from onceflow.broker.txn import log_format as tf
from onceflow.log.append_origin import AppendOrigin
from onceflow.protocol.record_codec import encode_batch
from onceflow.protocol.records import control_batch_for_append, read_header

OFFSETS = "__consumer_offsets"
TXNS = "__transaction_state"


def topics(tmp_path) -> TopicManager:
    manager = TopicManager(tmp_path)
    manager.load()
    manager.create_topic(OFFSETS, 2, internal=True)
    manager.create_topic(TXNS, 1, internal=True)
    return manager


def append(manager, topic: str, records: list, partition: int = 0, *, pid: int = -1, seq: int = 0) -> None:
    batch = bytearray(
        encode_batch(
            records,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq if pid >= 0 else -1,
            transactional=pid >= 0,
        )
    )
    view = memoryview(batch)
    manager.get_partition(topic, partition).append(
        [(read_header(view), view)], origin=AppendOrigin.COORDINATOR
    )


def marker(manager, topic: str, pid: int, commit: bool, partition: int = 0) -> None:
    header, batch = control_batch_for_append(pid, 0, commit=commit, coordinator_epoch=0, timestamp_ms=1)
    manager.get_partition(topic, partition).append(
        [(header, memoryview(batch))], origin=AppendOrigin.COORDINATOR
    )


def offset(group: str, tp: tuple[str, int], value: int | None):
    key = gf.encode_offset_key(gf.OffsetKey(group, *tp))
    return (key, None if value is None else gf.encode_offset_value(gf.OffsetValue(value, -1, "", 1)))


def group(group_id: str, generation: int | None):
    key = gf.encode_group_key(gf.GroupKey(group_id))
    if generation is None:
        return (key, None)
    return (key, gf.encode_group_value(gf.GroupValue("consumer", generation, "range", "m", 1, ())))


def epoch(group_id: str, value: int):
    return (cg.encode_key(cg.ConsumerGroupKey(cg.GROUP_EPOCH, group_id)), cg.encode_epoch(value))


def txn(tid: str, status: int, updated_ms: int):
    value = tf.TransactionLogValue(7, 0, 60000, status, frozenset({("t", 0)}), updated_ms, 1000)
    return (tf.encode_key(tid), tf.encode_value(value))


def collected(logs: CoordinatorLogs, manager) -> dict[str, float]:
    families = Families()
    logs.collect(families, manager)
    return {s.name: s.value for f in families for s in f.samples if not s.labels}


def test_offset_commits_count_and_transactional_ones_wait_for_their_marker(tmp_path):
    manager = topics(tmp_path)
    append(manager, OFFSETS, [offset("old", ("t", 0), 5)])  # before the broker served: not counted
    logs = CoordinatorLogs()
    logs.start(manager)
    append(manager, OFFSETS, [offset("g", ("t", 0), 1), offset("g", ("t", 1), 2)])
    append(manager, OFFSETS, [offset("g", ("t", 0), None)], partition=1)  # a tombstone: not a commit
    append(manager, OFFSETS, [offset("tx", ("t", 0), 3), offset("tx", ("t", 1), 3)], pid=40)
    append(manager, OFFSETS, [offset("ab", ("t", 0), 9)], pid=41)
    name = "kafka_server_group_coordinator_metrics_offset_commit_count"
    assert collected(logs, manager)[name] == 2  # the transactional ones are not committed yet
    marker(manager, OFFSETS, 40, commit=True)
    marker(manager, OFFSETS, 41, commit=False)
    assert collected(logs, manager)[name] == 4  # 40's two; 41's aborted one never
    assert collected(logs, manager)[name] == 4  # nothing read twice


def test_rebalances_are_new_generations_and_group_epochs(tmp_path):
    manager = topics(tmp_path)
    logs = CoordinatorLogs()
    logs.start(manager)
    append(manager, OFFSETS, [group("c", 1), group("c", 1), group("c", 2), group("empty", 0)])
    append(manager, OFFSETS, [epoch("k", 1), epoch("k", 1), epoch("k", 2), epoch("k", 3)], partition=1)
    append(manager, OFFSETS, [group("c", None), group("c", 1)])  # deleted, then a new group of that name
    values = collected(logs, manager)
    assert values["kafka_server_group_coordinator_metrics_group_completed_rebalance_count"] == 3
    assert values["kafka_server_group_coordinator_metrics_consumer_group_rebalance_count"] == 3


def test_transactions_committed_aborted_and_commit_time(tmp_path):
    manager = topics(tmp_path)
    logs = CoordinatorLogs()
    logs.start(manager)
    append(manager, TXNS, [txn("a", 1, 2000), txn("a", 2, 3000), txn("a", 4, 3040)])  # 40 ms to commit
    append(manager, TXNS, [txn("b", 1, 2000), txn("b", 3, 2500), txn("b", 5, 2600)])
    append(manager, TXNS, [txn("a", 1, 5000), txn("a", 2, 6000)])  # committing, not done yet
    values = collected(logs, manager)
    name = "kafka_coordinator_transaction_transactionstatemanager_"
    assert values[name + "commits_total"] == 1 and values[name + "aborts_total"] == 1
    assert values[name + "committimems_count"] == 1 and values[name + "committimems_sum"] == 40
    append(manager, TXNS, [txn("a", 4, 6005)])
    values = collected(logs, manager)
    assert values[name + "commits_total"] == 2 and values[name + "committimems_sum"] == 45


def test_a_scrape_reads_at_most_its_budget_and_the_next_goes_on(tmp_path):
    manager = topics(tmp_path)
    logs = CoordinatorLogs(max_bytes=1)  # one batch per topic per scrape
    logs.start(manager)
    for n in range(3):
        append(manager, OFFSETS, [offset("g", ("t", n), n)])
    name = "kafka_server_group_coordinator_metrics_offset_commit_count"
    assert [collected(logs, manager)[name] for _ in range(4)] == [1, 2, 3, 3]
