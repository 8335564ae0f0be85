"""ProducerStateEntry's single-construction moves equal the field-by-field replacements they stand for."""

from onceflow.log.producer_entry import BatchMetadata, ProducerStateEntry


def _entry(**fields):
    base = dict(
        producer_id=7,
        epoch=3,
        batches=(BatchMetadata(0, 4, 10, 14, 100),),
        coordinator_epoch=1,
        last_timestamp=100,
        current_txn_first_offset=None,
    )
    base.update(fields)
    return ProducerStateEntry(**base)


def test_with_batch_starting_a_transaction():
    batch = BatchMetadata(5, 9, 15, 19, 200)
    entry = _entry()
    assert entry.with_batch(3, batch, txn_first_offset=15) == entry.with_batch(3, batch).replaced(
        current_txn_first_offset=15
    )
    assert entry.with_batch(3, batch, txn_first_offset=15).current_txn_first_offset == 15


def test_with_batch_keeps_the_open_transaction_unless_told():
    batch = BatchMetadata(5, 9, 15, 19, 200)
    entry = _entry(current_txn_first_offset=10)
    assert entry.with_batch(3, batch).current_txn_first_offset == 10
    assert entry.with_batch(3, batch, txn_first_offset=None).current_txn_first_offset is None
    assert entry.with_batch(4, batch).batches == (batch,)  # a new epoch forgets the old batches


def test_with_txn_ended_is_with_epoch_then_replaced():
    entry = _entry(current_txn_first_offset=10)
    for epoch in (3, 4):
        expected = entry.with_epoch(epoch).replaced(
            coordinator_epoch=2, last_timestamp=300, current_txn_first_offset=None
        )
        assert entry.with_txn_ended(epoch, 2, 300) == expected
