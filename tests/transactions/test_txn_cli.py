"""``onceflow txn list|describe|find-hanging|abort`` against an in-process broker."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner
from tests.broker.raw_client import RawClient
from tests.broker.test_client_smoke import ThreadedBroker
from tests.transactions import wire

from onceflow.cli.main import cli
from onceflow.protocol.records import validate_produce_records

TOPIC = "cli-txn"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with ThreadedBroker(tmp_path_factory.mktemp("txn-cli")) as running:
        running.call(lambda: running.broker.topics.create_topic(TOPIC, 2))
        yield running


def txn_cli(broker, *args: str):
    result = CliRunner().invoke(cli, ["txn", *args, "--bootstrap-server", broker.bootstrap])
    return result.exit_code, result.output


async def _request(port: int, request, version: int):
    client = await RawClient.connect(port)
    try:
        return await client.request(request, version)
    finally:
        await client.close()


async def _append(partition, batch: bytes):
    return partition.append(validate_produce_records(bytearray(batch)))


def request(broker, req, version):
    return asyncio.run(_request(broker.port, req, version))


def test_list_and_describe_an_ongoing_transaction(broker):
    resp = request(broker, wire.init_producer_id("cli-listed"), 4)
    request(broker, wire.add_partitions("cli-listed", resp.producer_id, resp.producer_epoch, {TOPIC: [1]}), 3)
    code, output = txn_cli(broker, "list", "--state", "Ongoing")
    assert code == 0 and "cli-listed" in output and "Ongoing" in output
    code, output = txn_cli(broker, "describe", "cli-listed")
    assert code == 0 and f"{TOPIC}-1" in output and str(resp.producer_id) in output
    code, output = txn_cli(broker, "describe", "nobody")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in output


def test_list_filters_by_transactional_id_pattern(broker):
    for tid in ("cli-pat-orders", "cli-pat-audit"):
        request(broker, wire.init_producer_id(tid), 4)
    code, output = txn_cli(broker, "list", "--transactional-id-pattern", "cli-pat-o.*")
    assert code == 0 and "cli-pat-orders" in output and "cli-pat-audit" not in output
    code, output = txn_cli(broker, "list", "--transactional-id-pattern", "cli-pat-(?!audit).*")
    assert code == 1 and "INVALID_REGULAR_EXPRESSION" in output


def test_find_hanging_and_abort_moves_the_lso(broker):
    # A hanging transaction: data in the log that no coordinator knows of (as after a lost
    # coordinator state), so no coordinator will ever write its marker. Appended on the broker's
    # loop, past the Produce path, where the coordinator would refuse it.
    batch = wire.txn_batch([b"stuck"], 777_000, 3, 0)
    partition = broker.broker.topics.get_partition(TOPIC, 0)
    appended = asyncio.run_coroutine_threadsafe(_append(partition, batch), broker._loop).result(10)
    assert appended.base_offset == 0
    data = request(broker, wire.fetch(TOPIC, 0, 0, 1), 11).responses[0].partitions[0]
    assert data.last_stable_offset == 0 < data.high_watermark

    code, output = txn_cli(broker, "find-hanging", "--topic", TOPIC)
    assert code == 0 and "777000" in output
    code, output = txn_cli(broker, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0")
    assert code == 0 and "aborted" in output
    data = request(broker, wire.fetch(TOPIC, 0, 0, 1), 11).responses[0].partitions[0]
    assert data.last_stable_offset == data.high_watermark
    assert [a.producer_id for a in data.aborted_transactions] == [777_000]
    code, output = txn_cli(broker, "find-hanging", "--topic", TOPIC)
    assert code == 0 and "no hanging transactions" in output
