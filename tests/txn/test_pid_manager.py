import json

import pytest

from onceflow.broker.txn.errors import ProducerIdsExhausted
from onceflow.broker.txn.pid_manager import PRODUCER_ID_BLOCK_FILE, ProducerIdManager


def test_ids_are_unique_and_the_block_end_is_persisted_before_use(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    first = manager.generate_producer_id()
    assert first == 0
    assert json.loads((tmp_path / PRODUCER_ID_BLOCK_FILE).read_text())["next_block_start"] == 10
    ids = [first] + [manager.generate_producer_id() for _ in range(24)]
    assert ids == list(range(25))
    assert json.loads((tmp_path / PRODUCER_ID_BLOCK_FILE).read_text())["next_block_start"] == 30
    assert not list(tmp_path.glob("*.tmp"))


def test_restart_resumes_after_the_persisted_block(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    handed_out = {manager.generate_producer_id() for _ in range(3)}
    # a crash here loses ids 3..9 of the block, which is fine: they are never handed out
    restarted = ProducerIdManager(tmp_path, block_size=10)
    after = [restarted.generate_producer_id() for _ in range(12)]
    assert after[0] == 10
    assert handed_out.isdisjoint(after) and len(set(after)) == 12
    again = ProducerIdManager(tmp_path, block_size=10)
    assert again.generate_producer_id() == 30


def test_exhaustion_raises_instead_of_repeating(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=4, max_producer_id=5)
    assert [manager.generate_producer_id() for _ in range(6)] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ProducerIdsExhausted):
        manager.generate_producer_id()
    with pytest.raises(ProducerIdsExhausted):
        ProducerIdManager(tmp_path, block_size=4, max_producer_id=5).generate_producer_id()


def test_an_unreadable_file_stops_the_start(tmp_path):
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text("{not json")
    with pytest.raises(RuntimeError, match="unreadable"):
        ProducerIdManager(tmp_path)


def test_coordinator_ids_never_repeat_across_a_restart(tmp_path):
    from onceflow.broker.txn import TransactionCoordinator

    from .fakes import FakeMarkers, FakeTxnLog, run

    def coordinator():
        c = TransactionCoordinator(
            log_writer=FakeTxnLog(),
            marker_writer=FakeMarkers(),
            producer_ids=ProducerIdManager(tmp_path, block_size=2),
        )
        c.begin_loading(0)
        c.load_from_records([])
        return c

    first = coordinator()
    before = {run(first.init_producer_id(t, 1000)).producer_id for t in ("a", "b", None)}
    second = coordinator()
    after = {run(second.init_producer_id(t, 1000)).producer_id for t in ("c", None, None)}
    assert len(before) == 3 and len(after) == 3 and before.isdisjoint(after)
