"""A broker started with ``--config transaction.version=1`` (a cluster not upgraded to KIP-890 part 2):
ApiVersions finalizes level 1, our producer falls back to the protocol v1 (AddPartitionsToTxn,
Produce v11, EndTxn v4, one epoch for the producer's session), and a transactional Produce below v12
for a partition the coordinator has not added is rejected: TRANSACTION_ABORTABLE at v11,
INVALID_TXN_STATE for older clients (v10 and below), as Kafka answers.

As in Kafka, the broker answers each request by its API version, not by the finalized level (KIP-890
review, KAFKA-14563: "if we send a request version the server can handle, we can handle it"): a
Produce v12 still adds its partition implicitly. The level only tells clients which protocol to use.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.transactions import wire

from onceflow.client import AsyncClient
from onceflow.client.admin import AsyncAdminClient
from onceflow.client.connection import Connection
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer import (
    AsyncProducer,
    RecordTooLargeError,
    TransactionAbortableError,
    txn_requests,
)
from onceflow.protocol.errors import ErrorCode


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("tv1"), extra_args=["--config", "transaction.version=1"])
    proc.start()
    yield proc
    proc.stop()


def test_api_versions_finalizes_level_1(broker):
    async def run():
        conn = await Connection.open("127.0.0.1", broker.port)
        try:
            return conn.finalized_features
        finally:
            await conn.close()

    assert asyncio.run(run()) == {"transaction.version": 1}


def test_our_producer_falls_back_to_the_protocol_v1(broker, monkeypatch):
    topic = topic_name("tv1")
    sent_versions: list[tuple[str, int]] = []
    real_send = Connection.send

    async def recording_send(self, request, *, version=None):
        if request.API_KEY in (0, 24, 26):  # Produce, AddPartitionsToTxn, EndTxn
            sent_versions.append((type(request).__name__, version))
        return await real_send(self, request, version=version)

    monkeypatch.setattr(Connection, "send", recording_send)
    real_submit_frame = Connection.submit_frame

    def recording_submit_frame(self, request):  # Produce requests the producer writes by hand
        sent_versions.append(("ProduceRequest", request.version))
        return real_submit_frame(self, request)

    monkeypatch.setattr(Connection, "submit_frame", recording_submit_frame)

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tv1-{topic}"})
        await producer.start()
        try:
            await producer.init_transactions()
            epochs = [producer.producer_id_and_epoch]
            for n, commit in enumerate([True, False, True]):
                producer.begin_transaction()
                assert not producer.txn.transaction_v2
                await (await producer.send(topic, b"v%d" % n, partition=0))
                await (producer.commit_transaction() if commit else producer.abort_transaction())
                epochs.append(producer.producer_id_and_epoch)
        finally:
            await producer.close()
        async with AsyncConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
        ) as consumer:
            consumer.assign([TP(topic, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 2 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in records)
        return epochs, values

    epochs, values = asyncio.run(run())
    assert len(set(epochs)) == 1  # protocol v1: no epoch bump per transaction
    assert values == [b"v0", b"v2"]
    names = {name for name, _ in sent_versions}
    assert "AddPartitionsToTxnRequest" in names
    assert max(v for name, v in sent_versions if name == "ProduceRequest") == 11
    assert max(v for name, v in sent_versions if name == "EndTxnRequest") == 4


def test_unadded_partition_is_rejected_below_produce_v12_and_added_by_v12(broker):
    topic = topic_name("tv1-raw")
    tid = f"tv1-raw-{topic}"

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=2)
        conn = await Connection.open("127.0.0.1", broker.port)
        try:
            init = await conn.send(wire.init_producer_id(tid), version=4)
            pid, epoch = init.producer_id, init.producer_epoch
            # Partition 0 goes in through a v1 path (AddPartitionsToTxn) so that the transaction is open.
            await conn.send(wire.add_partitions(tid, pid, epoch, {topic: [0]}), version=3)
            v10 = await conn.send(
                wire.produce(topic, 1, wire.txn_batch([b"w"], pid, epoch, 0), tid), version=10
            )
            v11 = await conn.send(
                wire.produce(topic, 1, wire.txn_batch([b"x"], pid, epoch, 0), tid), version=11
            )
            v12 = await conn.send(
                wire.produce(topic, 1, wire.txn_batch([b"y"], pid, epoch, 0), tid), version=12
            )
            async with AsyncAdminClient(broker.bootstrap) as admin:
                described = await admin.describe_transaction(tid)
            await conn.send(wire.end_txn(tid, pid, epoch, False), version=4)
        finally:
            await conn.close()
        return v10, v11, v12, described

    v10, v11, v12, described = asyncio.run(run())
    assert v10.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE
    assert v11.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTION_ABORTABLE
    assert v12.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert TP(topic, 1) in described.partitions


def test_offsets_keep_add_offsets_to_txn_under_the_protocol_v1(broker, monkeypatch):
    """The send_offsets path keeps AddOffsetsToTxn under the protocol v1."""
    topic, group = topic_name("tv1-off"), topic_name("tv1-group")
    calls = []
    real = txn_requests.add_offsets_to_txn

    async def counting(*args, **kwargs):
        calls.append(args[2])
        return await real(*args, **kwargs)

    monkeypatch.setattr(txn_requests, "add_offsets_to_txn", counting)

    async def run():
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tv1o-{topic}"})
        await producer.start()
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            await (await producer.send(topic, b"z", partition=0))
            await producer.send_offsets_to_transaction({(topic, 0): 7}, group)
            await producer.commit_transaction()
        finally:
            await producer.close()
        async with AsyncAdminClient(broker.bootstrap) as admin:
            return await admin.list_group_offsets(group, [TP(topic, 0)])

    offsets = asyncio.run(run())
    assert calls == [group]
    assert offsets[TP(topic, 0)].offset == 7


def test_transaction_version_setting_is_checked(tmp_path):
    import click

    from onceflow.cli.serve import broker_config

    config = broker_config("127.0.0.1", 0, tmp_path, {}, {"transaction.version": "1"})
    assert config.transaction_version == 1
    with pytest.raises(click.BadParameter, match="transaction.version must be 0..2"):
        broker_config("127.0.0.1", 0, tmp_path, {}, {"transaction.version": "3"})


def test_a_record_too_large_fails_the_transaction_and_the_abort_bumps_the_epoch(broker):
    """Under the protocol v1, Kafka's client marks an abortable error from send() as needing a
    client-side epoch bump (TransactionManager.maybeTransitionToErrorState): after the abort the
    producer calls InitProducerId again, and the next transaction commits under the new epoch."""
    topic = topic_name("tv1-large")

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=1)
        producer = AsyncProducer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": f"tv1l-{topic}",
                "max.request.size": 2_000,
            }
        )
        await producer.start()
        try:
            await producer.init_transactions()
            before = producer.producer_id_and_epoch
            producer.begin_transaction()
            await (await producer.send(topic, b"written-then-aborted", partition=0))
            refused = await producer.send(topic, b"x" * 3_000, partition=0)
            with pytest.raises(RecordTooLargeError, match="max.request.size"):
                await refused
            with pytest.raises(TransactionAbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            after = producer.producer_id_and_epoch
            producer.begin_transaction()
            await (await producer.send(topic, b"committed", partition=0))
            await producer.commit_transaction()
        finally:
            await producer.close()
        async with AsyncConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
        ) as consumer:
            consumer.assign([TP(topic, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while not values and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in records)
        return before, after, values

    before, after, values = asyncio.run(run())
    assert after == (before[0], before[1] + 1)
    assert values == [b"committed"]
