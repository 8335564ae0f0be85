"""Transaction protocol v2 (KIP-890 part 2) end to end, on one broker finalizing transaction.version 2
(the default): ApiVersions advertises the feature, our producer uses Produce v12 without
AddPartitionsToTxn / AddOffsetsToTxn and adopts the epoch EndTxn v5 gives it, zombies are fenced,
and a delayed EndTxn can never end a later transaction (KAFKA-17754). confluent-kafka (librdkafka,
no KIP-890) keeps working on the same broker with the protocol v1.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import EndTxnRequest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AsyncClient
from onceflow.client.admin import AsyncAdminClient
from onceflow.client.connection import Connection
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer import AsyncProducer, ProducerFencedError, txn_requests
from onceflow.protocol.errors import ErrorCode

TXN_FEATURE = "transaction.version"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("tv2"))
    proc.start()
    yield proc
    proc.stop()


def transactional(bootstrap: str, tid: str) -> AsyncProducer:
    return AsyncProducer({"bootstrap.servers": bootstrap, "transactional.id": tid})


async def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    async with AsyncClient(bootstrap) as client:
        await client.create_topic(topic, partitions=partitions)


async def committed_values(bootstrap: str, topic: str, partitions: int, until: int) -> list[bytes]:
    """Everything a read_committed consumer gets from the start of ``partitions`` partitions, sorted."""
    async with AsyncConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TP(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < until and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        for _ in range(3):  # anything beyond what was expected must show up too
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value for r in records)
        return sorted(values)


async def send_all(producer: AsyncProducer, topic: str, values: list[bytes], partitions: int = 1) -> None:
    futures = [await producer.send(topic, v, partition=i % partitions) for i, v in enumerate(values)]
    await asyncio.gather(*futures)


@pytest.fixture
def v1_calls(monkeypatch):
    """Counts the protocol v1 requests our producer makes (none are expected under v2)."""
    calls = {"add_partitions": 0, "add_offsets": 0}
    real_partitions, real_offsets = txn_requests.add_partitions_to_txn, txn_requests.add_offsets_to_txn

    async def add_partitions(*args, **kwargs):
        calls["add_partitions"] += 1
        return await real_partitions(*args, **kwargs)

    async def add_offsets(*args, **kwargs):
        calls["add_offsets"] += 1
        return await real_offsets(*args, **kwargs)

    monkeypatch.setattr(txn_requests, "add_partitions_to_txn", add_partitions)
    monkeypatch.setattr(txn_requests, "add_offsets_to_txn", add_offsets)
    return calls


def _raw_api_versions_v3(port: int) -> ApiVersionsResponse:
    """kafka-python's ApiVersionsRequest v3 over a plain socket (the response header is always v0)."""
    request = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    request.API_VERSION = 3
    request.with_header(correlation_id=7, client_id="raw")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            data += chunk
    size = struct.unpack(">i", data[:4])[0]
    assert struct.unpack(">i", data[4:8])[0] == 7
    return ApiVersionsResponse.decode(data[8 : 4 + size], version=3)


def test_api_versions_advertises_transaction_version_2(broker):
    raw = _raw_api_versions_v3(broker.port)
    supported = {f.name: (f.min_version, f.max_version) for f in raw.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in raw.finalized_features}
    assert raw.error_code == 0
    assert supported[TXN_FEATURE] == (1, 2)  # v3 clients predate ranges starting at 0 (KIP-1022)
    assert finalized[TXN_FEATURE] == (2, 2)
    assert raw.finalized_features_epoch >= 0

    async def ours():
        conn = await Connection.open("127.0.0.1", broker.port)
        try:
            return conn.finalized_features, conn.broker_versions
        finally:
            await conn.close()

    features, versions = asyncio.run(ours())
    assert features == {TXN_FEATURE: 2}
    assert versions[0][1] >= 12 and versions[26][1] >= 5  # Produce v12, EndTxn v5


def test_commit_and_abort_bump_the_epoch_and_read_committed_sees_the_committed(broker, v1_calls):
    topic = topic_name("tv2")

    async def run():
        await create(broker.bootstrap, topic, partitions=2)
        producer = transactional(broker.bootstrap, f"tv2-{topic}")
        await producer.start()
        try:
            await producer.init_transactions()
            epochs = [producer.producer_id_and_epoch]
            for n, commit in enumerate([True, False, True]):
                producer.begin_transaction()
                assert producer.txn.transaction_v2
                await send_all(producer, topic, [b"t%d-%d" % (n, i) for i in range(4)], partitions=2)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
                epochs.append(producer.producer_id_and_epoch)
            async with AsyncAdminClient(broker.bootstrap) as admin:
                described = await admin.describe_transaction(f"tv2-{topic}")
        finally:
            await producer.close()
        return epochs, described, await committed_values(broker.bootstrap, topic, 2, until=8)

    epochs, described, values = asyncio.run(run())
    producer_id, first_epoch = epochs[0]
    assert epochs == [(producer_id, first_epoch + n) for n in range(4)]  # one bump per EndTxn
    assert (described.producer_id, described.producer_epoch) == epochs[-1]
    assert described.state == "CompleteCommit"
    assert values == sorted([b"t0-%d" % i for i in range(4)] + [b"t2-%d" % i for i in range(4)])
    assert v1_calls == {"add_partitions": 0, "add_offsets": 0}


def test_offsets_commit_in_the_transaction_without_add_offsets(broker, v1_calls):
    topic, group = topic_name("tv2-off"), topic_name("tv2-group")

    async def run():
        await create(broker.bootstrap, topic)
        producer = transactional(broker.bootstrap, f"tv2-off-{topic}")
        await producer.start()
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            await send_all(producer, topic, [b"x"])
            await producer.send_offsets_to_transaction({(topic, 0): 41}, group)
            await producer.abort_transaction()  # the offsets are dropped with it
            producer.begin_transaction()
            await send_all(producer, topic, [b"y"])
            await producer.send_offsets_to_transaction({(topic, 0): 42}, group)
            await producer.commit_transaction()
        finally:
            await producer.close()
        async with AsyncAdminClient(broker.bootstrap) as admin:
            return await admin.list_group_offsets(group, [TP(topic, 0)])

    offsets = asyncio.run(run())
    assert offsets[TP(topic, 0)].offset == 42
    assert v1_calls == {"add_partitions": 0, "add_offsets": 0}


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker):
    topic = topic_name("tv2-zombie")

    async def run():
        await create(broker.bootstrap, topic)
        tid = f"tv2-zombie-{topic}"
        zombie, successor = transactional(broker.bootstrap, tid), transactional(broker.bootstrap, tid)
        await zombie.start()
        await successor.start()
        try:
            await zombie.init_transactions()
            zombie.begin_transaction()
            await send_all(zombie, topic, [b"zombie"])
            await successor.init_transactions()  # aborts the zombie's transaction, bumps the epoch
            with pytest.raises(ProducerFencedError):
                await zombie.commit_transaction()
            successor.begin_transaction()
            await send_all(successor, topic, [b"successor"])
            await successor.commit_transaction()
        finally:
            await zombie.close()
            await successor.close()
        return await committed_values(broker.bootstrap, topic, 1, until=1)

    assert asyncio.run(run()) == [b"successor"]


def test_a_delayed_end_txn_never_ends_a_later_transaction(broker):
    """KAFKA-17754: EndTxn v5 of transaction N replayed after N completed is a harmless retry; replayed
    while N+1 is open it is PRODUCER_FENCED and N+1 goes on to commit."""
    topic = topic_name("tv2-replay")
    tid = f"tv2-replay-{topic}"

    async def replay(conn: Connection, pid: int, epoch: int, commit: bool):
        request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
        response = await conn.send(request, version=5)
        return ErrorCode(response.error_code), response.producer_id, response.producer_epoch

    async def run():
        await create(broker.bootstrap, topic)
        producer = transactional(broker.bootstrap, tid)
        await producer.start()
        raw = await Connection.open("127.0.0.1", broker.port)  # the only broker: the coordinator
        async with AsyncAdminClient(broker.bootstrap) as admin:
            try:
                await producer.init_transactions()
                producer.begin_transaction()
                await send_all(producer, topic, [b"n"])
                pid, epoch_n = producer.producer_id_and_epoch
                await producer.commit_transaction()
                after_n = await replay(raw, pid, epoch_n, True)  # the retry of N's commit
                producer.begin_transaction()
                await send_all(producer, topic, [b"n+1"])
                during = [await replay(raw, pid, epoch_n, commit) for commit in (True, False)]
                state_during = (await admin.describe_transaction(tid)).state
                await producer.commit_transaction()
                final = producer.producer_id_and_epoch
            finally:
                await raw.close()
                await producer.close()
        return pid, epoch_n, after_n, during, state_during, final

    pid, epoch_n, after_n, during, state_during, final = asyncio.run(run())
    assert after_n == (ErrorCode.NONE, pid, epoch_n + 1)  # the answer N's commit got
    assert [code for code, _, _ in during] == [ErrorCode.PRODUCER_FENCED, ErrorCode.PRODUCER_FENCED]
    assert state_during == "Ongoing"  # N+1 untouched by the late EndTxns
    assert final == (pid, epoch_n + 2)
    assert asyncio.run(committed_values(broker.bootstrap, topic, 1, until=2)) == [b"n", b"n+1"]


def test_confluent_kafka_transactions_unaffected_by_the_advertised_feature(broker):
    """librdkafka has no KIP-890 (confluentinc/librdkafka#5423): on a TV2 broker it keeps the protocol
    v1 (AddPartitionsToTxn, EndTxn below v5), and commits, aborts and read_committed still hold."""
    ck = pytest.importorskip("confluent_kafka")
    topic = topic_name("tv2-ck")
    asyncio.run(create(broker.bootstrap, topic))
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ck-{topic}"})
    producer.init_transactions(30)
    for n, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=b"ck%d-%d" % (n, i), partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    values = asyncio.run(committed_values(broker.bootstrap, topic, 1, until=6))
    assert values == sorted([b"ck0-%d" % i for i in range(3)] + [b"ck2-%d" % i for i in range(3)])
