"""Coordinator recovery: the broker dies (os._exit, as kill -9) after PrepareCommit is in
``__transaction_state`` and EndTxn answered, before any marker is written; after a restart the coordinator finishes the
transaction as committed and read_committed consumers see it."""

from __future__ import annotations

import asyncio

import pytest
from tests.broker.raw_client import RawClient
from tests.helpers.broker import BrokerProcess
from tests.transactions import wire
from tests.transactions.test_confluent_transactions import read_all

from onceflow.protocol.record_codec import decode_batches

TOPIC = "recovery"


async def _open_transaction_then_commit(port: int) -> tuple[int, int]:
    from kafka.protocol.admin import CreateTopicsRequest

    client = await RawClient.connect(port)
    T = CreateTopicsRequest.CreatableTopic
    await client.request(
        CreateTopicsRequest(
            topics=[T(name=TOPIC, num_partitions=2, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5000,
            validate_only=False,
        ),
        4,
    )
    resp = await client.request(wire.init_producer_id("recovering", 60_000), 4)
    pid, epoch = resp.producer_id, resp.producer_epoch
    await client.request(wire.add_partitions("recovering", pid, epoch, {TOPIC: [0, 1]}), 3)
    for partition in (0, 1):
        batch = wire.txn_batch([b"p%d-%d" % (partition, i) for i in range(3)], pid, epoch, 0)
        resp = await client.request(wire.produce(TOPIC, partition, batch, "recovering"), 9)
        assert resp.responses[0].partition_responses[0].error_code == 0
    await client.send(wire.end_txn("recovering", pid, epoch, True), 3)
    # EndTxn is answered once PrepareCommit is written (the decision), as in Kafka; the broker dies
    # right after, before any marker.
    assert (await client.receive(timeout=10)).error_code == 0
    assert await client.read_frame(timeout=10) is None
    await client.close()
    return pid, epoch


async def _read_committed(port: int) -> tuple[list[bytes], list[str]]:
    client = await RawClient.connect(port)
    values = []
    for partition in (0, 1):
        resp = await client.request(wire.fetch(TOPIC, partition, 0, 1), 11)
        data = resp.responses[0].partitions[0]
        assert data.aborted_transactions == []
        assert data.last_stable_offset == data.high_watermark == 4  # three records and the marker
        values += [
            r.value for b in decode_batches(bytes(data.records)) if b.control is None for r in b.records
        ]
    described = await client.request(wire.describe(["recovering"]), 0)
    await client.close()
    return values, [d.transaction_state for d in described.transaction_states]


@pytest.mark.onceflow_only
def test_prepare_commit_without_markers_completes_as_committed_after_restart(tmp_path):
    proc = BrokerProcess(tmp_path / "data", extra_args=("--fault", "crash-after-prepare=1"))
    proc.start()
    try:
        asyncio.run(_open_transaction_then_commit(proc.port))
        proc.kill9()  # already gone; reap it
        assert "fault crash-after-prepare" in proc.log_text()
        proc.extra_args = ()
        proc.restart()
        values, states = asyncio.run(_read_committed(proc.port))
        assert sorted(values) == sorted(b"p%d-%d" % (p, i) for p in (0, 1) for i in range(3))
        assert states == ["CompleteCommit"]
        assert sorted(read_all(proc.bootstrap, TOPIC, "read_committed", expected=6)) == sorted(values)
    finally:
        proc.stop()
