"""The accumulator: batches by batch.size, ready after linger.ms, buffer.memory back-pressure."""

import asyncio
import time

import pytest

from onceflow.client.producer.accumulator import RecordAccumulator
from onceflow.client.producer.batch import ProducerBatch, RecordFuture
from onceflow.client.producer.errors import BufferExhaustedError
from onceflow.protocol.record_codec import decode_batches

TP = ("t", 0)


def make(**kw) -> RecordAccumulator:
    settings = {"batch_size": 1000, "linger_ms": 50, "buffer_memory": 100_000, "transactional": False}
    settings.update(kw)
    return RecordAccumulator(**settings)


def append(acc, value=b"v" * 100, key=None, headers=(), ts=1) -> RecordFuture:
    result = acc.try_append("t", 0, ts, key, value, list(headers))
    assert isinstance(result, RecordFuture)
    return result


def test_records_fill_a_batch_up_to_batch_size_then_start_another():
    acc = make()
    futures = [append(acc) for _ in range(20)]
    batches = acc.queued(TP)
    assert len(batches) > 1
    assert batches[0].full and not batches[-1].full
    assert all(b.size() <= 1000 for b in batches[:-1])
    assert futures[0].batch is batches[0] and futures[-1].batch is batches[-1]
    assert sum(b.record_count for b in batches) == 20


def test_a_record_larger_than_batch_size_gets_its_own_batch():
    acc = make(batch_size=100)
    append(acc, value=b"small")
    big = append(acc, value=b"x" * 5000)
    assert big.index == 0 and big.batch.record_count == 1


def test_ready_after_linger_or_when_full_or_flushing():
    acc = make(linger_ms=1000)
    append(acc)
    now = time.monotonic()
    ready, delay = acc.ready(now, lambda tp, b: True)
    assert ready == [] and 0 < delay <= 1.0
    ready, _ = acc.ready(now + 1.01, lambda tp, b: True)
    assert ready == [TP]
    acc.flushing += 1
    assert acc.ready(now, lambda tp, b: True)[0] == [TP]
    acc.flushing -= 1
    for _ in range(20):
        append(acc)  # several batches: the first is full, ready at once
    assert acc.ready(now, lambda tp, b: True)[0] == [TP]
    assert acc.ready(now, lambda tp, b: False)[0] == []  # the sender may hold a partition back


def test_requeue_puts_retries_first_in_sequence_order():
    acc = make(batch_size=200)
    for _ in range(4):
        append(acc)
    first, second = acc.pop_first(TP), acc.pop_first(TP)
    first.base_sequence, second.base_sequence = 0, 1
    acc.requeue(TP, [second, first])
    assert acc.queued(TP)[:2] == [first, second]


def test_buffer_memory_blocks_then_times_out_with_a_clear_error():
    acc = make(batch_size=1000, buffer_memory=2000)
    for _ in range(2):
        acc.try_append("t", 0, 1, None, b"x" * 900, [])  # two batches of 1000 reserved bytes
    need = acc.try_append("t", 0, 1, None, b"x" * 900, [])
    assert need == 1000  # no room: the caller must wait
    with pytest.raises(BufferExhaustedError, match="max.block.ms"):
        acc.memory.wait_sync(need, time.monotonic() + 0.05)


def test_releasing_memory_wakes_an_async_waiter():
    acc = make(batch_size=1000, buffer_memory=1000)
    first = append(acc, value=b"x" * 900)

    async def scenario():
        need = acc.try_append("t", 0, 1, None, b"x" * 900, [])
        assert need == 1000
        waiter = asyncio.ensure_future(acc.memory.wait_async(need, time.monotonic() + 5))
        await asyncio.sleep(0)
        assert not waiter.done()
        acc.memory.release(first.batch.reserved)
        await asyncio.wait_for(waiter, 5)
        assert isinstance(acc.try_append("t", 0, 1, None, b"x" * 900, []), RecordFuture)

    asyncio.run(scenario())


def test_expire_removes_batches_older_than_delivery_timeout():
    acc = make()
    append(acc)
    assert acc.expire(time.monotonic(), 60.0) == []
    expired = acc.expire(time.monotonic() + 61, 60.0)
    assert len(expired) == 1 and not acc.has_queued()


def test_batch_encodes_records_and_sequence_rewrite_keeps_crc_valid():
    acc = make()
    futures = [
        append(acc, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")], ts=1000 + i) for i in range(3)
    ]
    batch: ProducerBatch = futures[0].batch
    batch.set_producer_state(42, 3, 10)
    batch.encode(compression=1)  # gzip
    batch.set_producer_state(42, 4, 0)  # KIP-360 rewrite after the bytes exist
    (decoded,) = list(decode_batches(batch.encoded))  # checks the CRC
    assert (decoded.header.producer_id, decoded.header.producer_epoch, decoded.header.base_sequence) == (
        42,
        4,
        0,
    )
    assert decoded.header.compression == 1
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded.records] == [
        (b"k%d" % i, b"v%d" % i, 1000 + i, [("h", b"x")]) for i in range(3)
    ]


def test_record_future_results_come_from_the_batch():
    acc = make()
    futures = [append(acc, ts=500 + i) for i in range(3)]
    calls = []
    futures[1].add_done_callback(calls.append)  # concurrent.futures style: fn(future)
    futures[0].batch.complete(base_offset=100)
    assert [f.get(1).offset for f in futures] == [100, 101, 102]
    assert futures[2].result().timestamp == 502
    assert calls == [futures[1]] and calls[0].exception() is None


def test_failed_batch_fails_every_record():
    acc = make()
    futures = [append(acc) for _ in range(2)]
    futures[0].batch.complete(-1, error=RuntimeError("boom"))
    for f in futures:
        with pytest.raises(RuntimeError, match="boom"):
            f.get(1)
