"""max.request.size: send() refuses a record no request could carry (Kafka's RecordTooLargeException,
the error of the record's future and callback, not raised), and the sender never puts more than
max.request.size of batches in one Produce request. MESSAGE_TOO_LARGE from the broker: a batch of
several records is split, one record fails with RecordTooLargeError."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.producer import ProduceRequest
from tests.client.producer.conftest import read_back
from tests.client.producer.test_sender import FakeNetwork, ScriptedBroker

from onceflow.client.producer import (
    AsyncProducer,
    Producer,
    RecordTooLargeError,
    TransactionAbortableError,
)
from onceflow.client.producer.accumulator import RecordAccumulator, serialized_size_upper_bound
from onceflow.client.producer.config import ProducerConfig
from onceflow.client.producer.sender import Sender
from onceflow.client.producer.transaction_manager import TransactionManager
from onceflow.protocol.errors import ErrorCode, KafkaError

RECORDS = [
    (None, b""),
    (None, None),
    (b"k", b"v" * 100),
    (b"key" * 50, b"v" * 70_000),
    (None, b"v" * 3_000_000),
]


@pytest.mark.parametrize("key,value", RECORDS, ids=lambda x: "none" if x is None else str(len(x)))
@pytest.mark.parametrize("headers", [[], [("h", b"x" * 200), ("trace", None)]], ids=["no-headers", "headers"])
def test_size_bound_is_at_least_the_built_batch_and_tight(key, value, headers):
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    builder.append(0, timestamp=1_700_000_000_000, key=key, value=value, headers=headers)
    built = len(builder.build())
    bound = serialized_size_upper_bound(key, value, headers)
    assert built <= bound <= built + 30


def test_a_record_too_large_fails_its_future_and_callback_and_nothing_is_queued(broker):
    """As Kafka's doSend: the RecordTooLargeException goes to the returned future and the callback,
    send() itself does not raise; the record is not queued and the producer goes on."""
    topic = f"size-{uuid.uuid4().hex[:8]}"
    limit = 2_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "max.request.size": limit})
    delivered: list[tuple] = []
    try:
        fits = b"a" * (limit - 100)  # bound: 61 + 21 + 1 + 2 + 1900 = 1985
        producer.send(topic, fits).get(30)
        big = b"b" * limit
        refused = producer.send(
            topic, big, callback=lambda metadata, error: delivered.append((metadata, error))
        )
        assert refused.done()  # failed at once, before anything was queued
        with pytest.raises(RecordTooLargeError) as failed:
            refused.get(0)
        assert failed.value.code == ErrorCode.MESSAGE_TOO_LARGE
        message = str(failed.value)  # the size, the limit and the setting's name
        assert f"{serialized_size_upper_bound(None, big, None)} bytes" in message
        assert f"max.request.size ({limit})" in message
        assert delivered == [(None, failed.value)]  # the callback ran, with the same error
        with pytest.raises(RecordTooLargeError, match="max.request.size"):
            producer.send(topic, b"c", headers=[("big", b"h" * limit)]).get(0)
        # send_many is all or nothing: the small records around the big one are not queued either.
        many = producer.send_many(topic, [b"d1", b"d2", b"e" * limit, b"d3"], partition=0)
        assert len(many) == 1 and many[0].done()
        with pytest.raises(RecordTooLargeError, match="record 2 of the 4 given to send_many"):
            many[0].get(0)
        producer.send(topic, b"last", partition=0).get(30)
        producer.flush()
    finally:
        producer.close()
    values = [m.value() for m in read_back(broker.bootstrap, topic, 2)]
    assert sorted(values) == sorted([fits, b"last"])


def test_buffer_memory_bounds_a_record_too(broker):
    async def scenario():
        producer = AsyncProducer(
            {"bootstrap.servers": broker.bootstrap, "buffer.memory": 5_000, "batch.size": 1_000}
        )
        topic = f"size-{uuid.uuid4().hex[:8]}"
        try:
            future = await producer.send(topic, b"x" * 6_000)  # does not raise
            with pytest.raises(RecordTooLargeError, match=r"buffer\.memory \(5000\)") as failed:
                await future
            assert f"{serialized_size_upper_bound(None, b'x' * 6_000, None)} bytes" in str(failed.value)
            (many,) = await producer.send_many(topic, [b"y", b"x" * 6_000])
            with pytest.raises(RecordTooLargeError, match="buffer.memory"):
                await many
            return (await (await producer.send(topic, b"small"))).offset
        finally:
            await producer.close()

    assert asyncio.run(scenario()) == 0  # nothing refused was written


@pytest.mark.parametrize("how", ["send", "send_many"])
def test_a_record_too_large_in_a_transaction_makes_it_abortable(broker, how):
    """Kafka's doSend moves a transactional producer to the abortable error state on such an error
    (TransactionManager.maybeTransitionToErrorState): the transaction's queued records fail, further
    sends and commit_transaction() raise TransactionAbortableError, and after abort_transaction()
    the next transaction commits."""
    topic = f"size-txn-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"size-{uuid.uuid4().hex[:8]}",
            "max.request.size": 2_000,
            "linger.ms": 60_000,  # `queued` stays in the accumulator until the failure
        }
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        queued = producer.send(topic, b"queued", partition=0)
        if how == "send":
            refused = producer.send(topic, b"x" * 3_000, partition=0)
        else:
            (refused,) = producer.send_many(topic, [b"y", b"x" * 3_000], partition=0)
        with pytest.raises(RecordTooLargeError):
            refused.get(0)
        with pytest.raises(TransactionAbortableError):
            queued.get(30)  # the sender failed the transaction's unsent record
        with pytest.raises(TransactionAbortableError):
            producer.send(topic, b"more", partition=0)
        with pytest.raises(TransactionAbortableError, match="max.request.size"):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"next", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    records = read_back(broker.bootstrap, topic, 1, read_committed=True)
    assert [m.value() for m in records] == [b"next"]


class _RequestLog(ScriptedBroker):
    """Notes how many batches and bytes of records each Produce request carried."""

    def __init__(self, node: int) -> None:
        super().__init__(node)
        self.requests: list[tuple[int, int]] = []

    def answer(self, request):
        frame = request.encode(correlation_id=1, client_id="test")
        decoded = ProduceRequest.decode(frame[4:], version=request.version, header=True)
        datas = [d for t in decoded.topic_data for d in t.partition_data]
        self.requests.append((len(datas), sum(len(d.records) for d in datas)))
        return super().answer(request)


def test_a_request_holds_no_more_than_max_request_size_of_batches():
    partitions = 6
    config = ProducerConfig(batch_size=400, linger_ms=0, max_request_size=1_000, retry_backoff_ms=1)
    broker = _RequestLog(0)
    network = FakeNetwork({0: broker})
    network.leaders = {("t", p): 0 for p in range(partitions)}
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(batch_size=400, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        # Fill one ~300-byte batch per partition before the sender starts, so all are ready at once.
        futures = [acc.try_append("t", p, 1, None, b"x" * 220, []) for p in range(partitions)]
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        await asyncio.wait_for(sender.wait_idle(), 10)
        await sender.stop()
        return [f.result().offset for f in futures]

    offsets = asyncio.run(scenario())
    assert len(offsets) == partitions and all(o >= 0 for o in offsets)
    assert sum(count for count, _ in broker.requests) == partitions
    assert len(broker.requests) >= 2  # six batches of ~300 bytes cannot share one 1,000-byte request
    assert all(size <= 1_000 for _, size in broker.requests), broker.requests


# -- MESSAGE_TOO_LARGE: the batch is split and sent again ------------------------------------------


def _topic_with_max_message_bytes(bootstrap: str, limit: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"split-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": str(limit)})
    admin.create_topics([new])[topic].result(30)
    return topic


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_a_batch_above_the_topics_max_message_bytes_is_split_until_it_fits(broker, idempotent):
    topic = _topic_with_max_message_bytes(broker.bootstrap, 5_000)
    settings = {
        "bootstrap.servers": broker.bootstrap,
        "batch.size": 20_000,
        "linger.ms": 200,  # the 15 records (~15 KB) wait in one batch
        "enable.idempotence": idempotent,
        "compression.type": "gzip" if idempotent else "none",  # splitting reads compressed batches too
    }
    values = [b"%02d" % i + os.urandom(998) for i in range(15)]  # random: gzip cannot shrink them
    producer = Producer(settings)
    try:
        futures = [
            producer.send(topic, v, key=b"k%d" % i, headers=[("i", b"%d" % i)]) for i, v in enumerate(values)
        ]
        producer.flush()
        offsets = [f.get(30).offset for f in futures]
        splits = producer._async._sender.splits
    finally:
        producer.close()
    assert splits >= 3  # 15 -> 7 + 8 -> 3 + 4 + 4 + 4: each half above 5,000 bytes is split again
    records = read_back(broker.bootstrap, topic, 15)
    assert sorted(m.offset() for m in records) == list(range(15))  # every record once
    by_offset = {m.offset(): m for m in records}
    for i, offset in enumerate(offsets):  # each future reports where its own record went
        record = by_offset[offset]
        assert (record.key(), record.value(), record.headers()) == (b"k%d" % i, values[i], [("i", b"%d" % i)])
    if idempotent:
        # Sequence numbers keep the order; without idempotence, as in Kafka, a resend may overtake.
        assert offsets == list(range(15))


def test_a_single_record_above_max_message_bytes_fails_with_record_too_large(broker):
    """MESSAGE_TOO_LARGE for a batch of one record cannot be split: Kafka's producer fails the record
    with RecordTooLargeException; ours with RecordTooLargeError, naming the setting to raise."""
    topic = _topic_with_max_message_bytes(broker.bootstrap, 5_000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        with pytest.raises(RecordTooLargeError, match="max.message.bytes") as failed:
            producer.send(topic, b"x" * 6_000).get(30)
        assert failed.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert producer.send(topic, b"small").get(30).offset == 0  # the producer goes on
    finally:
        producer.close()


def test_split_halves_keep_sequence_order_ahead_of_the_batches_in_flight_behind_them():
    """Idempotent; after a first acknowledged batch (0-1), three 2-record batches in flight: the first
    is MESSAGE_TOO_LARGE, so the broker refuses the next two as out of order. The halves take
    sequences 2 and 3, the two others are resent behind them with their own (4, 6), and every record
    gets its offset in send order."""
    config = ProducerConfig(batch_size=400, linger_ms=0, retry_backoff_ms=1, request_timeout_ms=1000)
    broker = ScriptedBroker(
        0,
        [
            ErrorCode.NONE,
            ErrorCode.MESSAGE_TOO_LARGE,
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ],
    )
    network = FakeNetwork({0: broker})
    txn = TransactionManager(None)
    txn.set_producer(7, 0)

    async def scenario():
        acc = RecordAccumulator(batch_size=400, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        futures = [acc.try_append("t", 0, 1, None, b"%d" % i * 150, []) for i in range(8)]
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        await asyncio.wait_for(sender.wait_idle(), 10)
        await sender.stop()
        return [f.result().offset for f in futures], sender, acc.memory.used

    offsets, sender, reserved = asyncio.run(scenario())
    sent = [(seq, count) for _node, _epoch, seq, count in broker.seen]
    assert sent[:4] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert sent[4:] == [(2, 1), (3, 1), (4, 2), (6, 2)]
    assert offsets == list(range(8))
    assert sender.splits == 1 and sender.epoch_bumps == 0
    assert reserved == 0  # the split batch's buffer.memory came back


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_only_the_record_too_large_for_the_topic_fails_when_its_batch_is_split(broker, idempotent):
    topic = _topic_with_max_message_bytes(broker.bootstrap, 5_000)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "batch.size": 20_000,
            "linger.ms": 200,
            "enable.idempotence": idempotent,
        }
    )
    values = [b"a" * 1_000, b"b" * 1_000, b"huge" * 1_500, b"c" * 1_000, b"d" * 1_000]
    try:
        futures = [producer.send(topic, v) for v in values]
        producer.flush()
        outcomes, errors = [], {}
        for i, future in enumerate(futures):
            try:
                outcomes.append(future.get(30).offset)
            except Exception as exc:  # noqa: BLE001 - the outcome is what we check
                outcomes.append(getattr(exc, "code", exc))
                errors[i] = exc
        after = producer.send(topic, b"after").get(30).offset
    finally:
        producer.close()
    assert outcomes[2] == ErrorCode.MESSAGE_TOO_LARGE
    assert isinstance(errors[2], RecordTooLargeError)
    written = [o for i, o in enumerate(outcomes) if i != 2]
    assert all(isinstance(o, int) and o >= 0 for o in written), outcomes
    records = read_back(broker.bootstrap, topic, 5)
    by_offset = {m.offset(): m.value() for m in records}
    assert sorted(by_offset) == sorted([*written, after])  # the four others and the next, once each
    assert [by_offset[o] for o in written] == [values[i] for i in (0, 1, 3, 4)]


def test_a_transaction_whose_batch_is_split_commits_every_record_once(broker):
    topic = _topic_with_max_message_bytes(broker.bootstrap, 5_000)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"split-{uuid.uuid4().hex[:8]}",
            "batch.size": 20_000,
            "linger.ms": 200,
        }
    )
    values = [b"%02d" % i + os.urandom(998) for i in range(12)]
    try:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send(topic, v) for v in values]
        producer.commit_transaction()
        offsets = [f.get(30).offset for f in futures]
        splits = producer._async._sender.splits
    finally:
        producer.close()
    assert splits >= 1
    assert offsets == list(range(12))
    records = read_back(broker.bootstrap, topic, 12, read_committed=True)
    assert [m.value() for m in records] == values


class _SequenceModelBroker:
    """A one-partition broker model that keeps Kafka's idempotence rules: a batch of more than
    ``max_records`` is MESSAGE_TOO_LARGE (checked first, as Kafka validates size before sequence); the
    next sequence is appended; a retry of one of the last five batches is answered with its offset;
    anything else is OUT_OF_ORDER_SEQUENCE_NUMBER. With ``rng``, some requests time out before they
    are read and some answers are lost after the append (both retriable)."""

    def __init__(self, max_records: int, rng=None) -> None:
        self.max_records = max_records
        self.rng = rng
        self.log: list[bytes] = []
        self.next_sequence = 0
        self.recent: list[tuple[int, int, int]] = []  # (base sequence, count, base offset)

    def version_for(self, request_cls) -> int:
        return 9

    def submit_frame(self, request):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        roll = self.rng.random() if self.rng is not None else 1.0
        if roll < 0.1:
            loop.call_soon(future.set_exception, KafkaError("timed out", ErrorCode.REQUEST_TIMED_OUT))
            return future
        answers = self._answer(request)
        if roll < 0.2:
            loop.call_soon(future.set_exception, KafkaError("response lost", ErrorCode.NETWORK_EXCEPTION))
        else:
            loop.call_soon(future.set_result, answers)
        return future

    def _answer(self, request):
        from onceflow.client.producer.produce_wire import PartitionResult
        from onceflow.protocol.record_codec import decode_batches

        frame = request.encode(correlation_id=1, client_id="test")
        decoded = ProduceRequest.decode(frame[4:], version=request.version, header=True)
        answers = []
        for topic in decoded.topic_data:
            for data in topic.partition_data:
                (batch,) = list(decode_batches(data.records))
                code, offset = self._append(batch.header.base_sequence, [r.value for r in batch.records])
                answers.append(PartitionResult(topic.name, data.index, code, offset, -1, None))
        return answers

    def _append(self, sequence: int, values: list[bytes]) -> tuple[int, int]:
        if len(values) > self.max_records:
            return ErrorCode.MESSAGE_TOO_LARGE, -1
        for base, count, offset in self.recent:
            if base == sequence and count == len(values):
                return ErrorCode.NONE, offset  # a retry of a batch already written
        if sequence != self.next_sequence:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        offset = len(self.log)
        self.log.extend(values)
        self.next_sequence += len(values)
        self.recent = [*self.recent[-4:], (sequence, len(values), offset)]
        return ErrorCode.NONE, offset


@pytest.mark.parametrize("seed", range(12))
def test_splits_retries_and_lost_answers_together_write_every_record_once_in_order(seed):
    """Batches of up to 8 records against a broker that takes at most 2 per batch, with requests
    timing out and answers lost at random: the log ends up holding every record exactly once, in
    send order, and each record's future has its offset."""
    import random

    model = _SequenceModelBroker(max_records=2, rng=random.Random(seed))
    config = ProducerConfig(batch_size=1_000, linger_ms=0, retry_backoff_ms=1, request_timeout_ms=1000)
    network = FakeNetwork({0: model})
    txn = TransactionManager(None)
    txn.set_producer(7, 0)
    values = [b"%03d" % i + b"v" * 100 for i in range(60)]

    async def scenario():
        acc = RecordAccumulator(batch_size=1_000, linger_ms=0, buffer_memory=1 << 20, transactional=False)
        sender = Sender(config, acc, network, txn)
        acc._on_new_batch = sender.wakeup
        sender.start()
        futures = []
        for value in values:
            futures.append(acc.try_append("t", 0, 1, None, value, []))
            if len(futures) % 7 == 0:
                await asyncio.sleep(0)  # let the sender drain some batches meanwhile
        await asyncio.wait_for(sender.wait_idle(), 20)
        await sender.stop()
        return [f.result().offset for f in futures], sender, acc.memory.used

    offsets, sender, reserved = asyncio.run(scenario())
    assert model.log == values
    assert offsets == list(range(len(values)))
    assert sender.splits >= 1 and reserved == 0
