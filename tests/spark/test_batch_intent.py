"""The batch-atomic sink's intent files and the option that selects the mode (no Spark session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onceflow.spark.batch_intent import INTENTS_KEPT, BatchIntent, IntentLog, checkpoint_path, query_id_of
from onceflow.spark.sink_options import EXACTLY_ONCE_ATOMIC, parse_sink_options


def test_the_last_intent_is_the_highest_batch_and_a_rewrite_replaces_it(tmp_path):
    log = IntentLog(tmp_path)
    assert log.read() is None
    log.write(BatchIntent(2, {"s-0": "7:1"}, decided_ms=5))
    log.write(BatchIntent(10, {"s-0": "7:3", "s-1": "8:3"}, decided_ms=9))
    assert log.read() == BatchIntent(10, {"s-0": "7:3", "s-1": "8:3"}, decided_ms=9)
    assert not log.read().completed
    log.write(BatchIntent(10, {"s-0": "7:3", "s-1": "8:3"}, decided_ms=9, completed_ms=12))
    assert log.read().completed and log.read(2).transactions == {"s-0": "7:1"}
    assert log.read(3) is None
    assert not any(p.name.endswith(".tmp") for p in log.directory.iterdir())


def test_old_intents_are_removed(tmp_path):
    log = IntentLog(tmp_path)
    for batch in range(INTENTS_KEPT + 5):
        log.write(BatchIntent(batch, completed_ms=1))
    assert log.batch_ids() == list(range(5, INTENTS_KEPT + 5))


def test_checkpoint_location_and_query_id(tmp_path):
    assert checkpoint_path(str(tmp_path)) == tmp_path
    assert checkpoint_path(f"file:{tmp_path}") == tmp_path
    assert checkpoint_path(f"file://{tmp_path}") == tmp_path
    with pytest.raises(ValueError, match="local"):
        checkpoint_path("hdfs://namenode/ckpt")
    assert query_id_of(tmp_path) is None
    (tmp_path / "metadata").write_text(json.dumps({"id": "abc-123"}) + "\n")
    assert query_id_of(Path(tmp_path)) == "abc-123"


def test_the_guarantee_option_and_its_producer_settings():
    options = parse_sink_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:9092",
            "topic": "t",
            "guarantee": "Exactly-Once-Atomic",
            "checkpointlocation": "/tmp/c",
        }
    )
    assert options.guarantee == EXACTLY_ONCE_ATOMIC and options.checkpoint_location == "/tmp/c"
    with pytest.raises(ValueError, match="transaction.timeout.ms"):
        parse_sink_options(
            {
                "kafka.bootstrap.servers": "127.0.0.1:9092",
                "topic": "t",
                "guarantee": EXACTLY_ONCE_ATOMIC,
                "kafka.transaction.timeout.ms": "60000",
            }
        )
    with pytest.raises(ValueError, match="exactly-once-atomic"):
        parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t", "guarantee": "atomic"})


def test_a_batch_intent_is_created_once_and_a_withdrawn_one_can_be_taken_again(tmp_path):
    log = IntentLog(tmp_path)
    first = BatchIntent(4, {"s-0": "7:1"}, decided_ms=5)
    second = BatchIntent(4, {"s-0": "9:2"}, decided_ms=6)
    assert log.create(first) is None
    assert log.create(second) == first  # the second driver finds the first's decision
    log.withdraw(second)  # not its intent: nothing happens
    assert log.read(4) == first
    log.withdraw(first)
    assert log.read(4) is None
    assert log.create(second) is None and log.read(4) == second
    assert not any(p.name.endswith(".tmp") for p in log.directory.iterdir())
