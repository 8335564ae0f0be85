"""The coordinator runtime on its own, with a toy shard (a key-value map) on the in-memory writer: the
write path, answers held until the high watermark, load and unload under coordinator epochs, timers.
No event loop, no sockets."""

from __future__ import annotations

import pytest

from onceflow.broker.coordinator.records import CoordinatorResult, StoredBatch
from onceflow.broker.coordinator.runtime import CoordinatorRuntime, PartitionStatus, append_error
from onceflow.broker.coordinator.scheduler import ManualScheduler
from onceflow.broker.coordinator.writer import InMemoryPartitionWriter
from onceflow.protocol.errors import (
    CoordinatorLoadInProgress,
    ErrorCode,
    KafkaError,
    NotCoordinator,
)


class KeyValues:
    """A shard whose state is the last value of each key, per partition."""

    def __init__(self) -> None:
        self.state: dict[int, dict[bytes, bytes | None]] = {}
        self.loaded: list[int] = []
        self.fail_replay = False

    def replay(self, partition: int, batch: StoredBatch) -> None:
        if self.fail_replay:
            raise ValueError("a bug in replay")
        for key, value in batch.records:
            self.state.setdefault(partition, {})[key] = value

    def on_loaded(self, partition: int) -> None:
        self.loaded.append(partition)

    def on_unloaded(self, partition: int) -> None:
        self.state.pop(partition, None)


def put(key: bytes, value: bytes, response: str = "ok"):
    return lambda: CoordinatorResult([(key, value)], response)


@pytest.fixture
def rig():
    writer = InMemoryPartitionWriter(2)
    shard = KeyValues()
    clock = ManualScheduler()
    runtime = CoordinatorRuntime("__test", writer, shard, clock)
    runtime.load(0, epoch=1)
    return writer, shard, clock, runtime


def test_an_operation_is_appended_then_replayed_and_its_answer_waits_for_the_high_watermark(rig):
    writer, shard, _clock, runtime = rig
    writer.hold_high_watermark = True
    assert runtime.write(0, put(b"k", b"v1")) == "ok"
    assert shard.state[0] == {b"k": b"v1"} and len(writer.batches[0]) == 1
    answered = []
    runtime.when_committed(0, runtime.last_written_offset(0), answered.append)
    assert answered == []  # written, not committed: nobody hears of it yet
    writer.release_high_watermark()
    assert answered == [None]


def test_a_failed_append_changes_nothing_and_answers_kafkas_error(rig):
    writer, shard, _clock, runtime = rig
    runtime.write(0, put(b"k", b"v1"))
    failures = []
    writer.fail_appends = OSError("disk gone")
    with pytest.raises(KafkaError) as raised:
        runtime.write(0, lambda: CoordinatorResult([(b"k", b"v2")], on_failed=failures.append))
    assert raised.value.code is ErrorCode.NOT_COORDINATOR and raised.value.retriable
    assert failures == [raised.value]
    assert shard.state[0] == {b"k": b"v1"} and len(writer.batches[0]) == 1
    writer.fail_appends = None
    runtime.write(0, put(b"k", b"v2"))
    assert shard.state[0] == {b"k": b"v2"}


@pytest.mark.parametrize(
    ("cause", "answer"),
    [
        (KafkaError("x", ErrorCode.NOT_ENOUGH_REPLICAS), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (KafkaError("x", ErrorCode.REQUEST_TIMED_OUT), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (KafkaError("x", ErrorCode.NOT_LEADER_OR_FOLLOWER), ErrorCode.NOT_COORDINATOR),
        (KafkaError("x", ErrorCode.KAFKA_STORAGE_ERROR), ErrorCode.NOT_COORDINATOR),
        (OSError("EIO"), ErrorCode.NOT_COORDINATOR),
        (KafkaError("x", ErrorCode.RECORD_LIST_TOO_LARGE), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_append_errors_are_mapped_as_kafka_maps_them(cause, answer):
    assert append_error(cause, "__test-0").code is answer


def test_partitions_not_served_refuse_and_loading_under_an_older_epoch_changes_nothing(rig):
    writer, shard, _clock, runtime = rig
    with pytest.raises(NotCoordinator):
        runtime.write(1, put(b"k", b"v"))
    runtime.begin_load(1, epoch=3)
    with pytest.raises(CoordinatorLoadInProgress):
        runtime.write(1, put(b"k", b"v"))
    runtime.finish_load(1)
    runtime.write(1, put(b"k", b"v"))
    assert not runtime.load(1, epoch=2)  # an older leader's load
    runtime.unload(1, epoch=2)  # an older leader's unload
    assert runtime.status(1) is PartitionStatus.ACTIVE and shard.state[1] == {b"k": b"v"}


def test_unloading_drops_the_state_and_fails_what_waits_and_loading_replays_the_log(rig):
    writer, shard, _clock, runtime = rig
    writer.hold_high_watermark = True
    runtime.write(0, put(b"a", b"1"))
    answered = []
    runtime.when_committed(0, runtime.last_written_offset(0), answered.append)
    runtime.unload(0)
    assert isinstance(answered[0], NotCoordinator)
    assert 0 not in shard.state and runtime.status(0) is PartitionStatus.INACTIVE
    writer.release_high_watermark()
    assert runtime.load(0, epoch=2)  # another broker, or this one again: the same replay
    assert shard.state[0] == {b"a": b"1"} and runtime.epoch(0) == 2


def test_an_answer_given_during_an_operation_waits_for_that_operations_batch(rig):
    writer, _shard, _clock, runtime = rig
    writer.hold_high_watermark = True
    delivered = []

    def op():
        runtime.hold(0, lambda error: delivered.append(("answer", error)))
        return CoordinatorResult([(b"k", b"v")])

    runtime.write(0, op)
    assert delivered == []
    writer.release_high_watermark()
    assert delivered == [("answer", None)]


def test_an_operation_may_not_start_another_on_its_partition(rig):
    _writer, _shard, _clock, runtime = rig
    with pytest.raises(RuntimeError):
        runtime.write(0, lambda: runtime.write(0, put(b"k", b"v")) and CoordinatorResult())


def test_timers_are_operations_retried_after_a_failed_append_and_dropped_by_an_unload(rig):
    writer, shard, clock, runtime = rig
    runtime.schedule_timer(0, 1000, put(b"timer", b"fired"))
    writer.fail_appends = OSError("disk gone")
    clock.advance(1000)
    assert b"timer" not in shard.state.get(0, {})
    writer.fail_appends = None
    clock.advance(500)  # Kafka's timer retry backoff
    assert shard.state[0][b"timer"] == b"fired"
    runtime.schedule_timer(0, 1000, put(b"late", b"x"), key="late")
    runtime.schedule_timer(0, 1000, put(b"late", b"replaced"), key="late")
    runtime.unload(0)
    runtime.load(0, epoch=2)
    clock.advance(5000)
    assert b"late" not in shard.state[0]  # the timer belonged to the previous epoch


def test_a_replay_that_fails_after_the_append_rebuilds_the_state_from_the_log(rig):
    """The batch is in the log but the state may hold part of it: the partition is rebuilt from the
    log; while that fails too (a replay bug is no accident) it serves nobody."""
    writer, shard, _clock, runtime = rig
    runtime.write(0, put(b"k", b"v1"))
    shard.fail_replay = True
    with pytest.raises(KafkaError):
        runtime.write(0, put(b"k", b"v2"))
    assert runtime.status(0) is PartitionStatus.FAILED
    with pytest.raises(NotCoordinator):
        runtime.write(0, put(b"k", b"v3"))
    shard.fail_replay = False
    runtime.reload_soon(0)
    assert shard.state[0] == {b"k": b"v2"}  # the log has it: the state is the log's again
