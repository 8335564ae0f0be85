"""The transaction coordinator over the wire: raw requests against an in-process broker."""

from __future__ import annotations

import asyncio

from tests.broker.raw_client import RawClient, running_broker
from tests.transactions import wire

from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.record_codec import decode_batches

TOPIC = "txn-wire"
E = ErrorCode


def run(coro):
    return asyncio.run(coro)


async def _setup(broker, partitions: int = 2) -> RawClient:
    broker.topics.create_topic(TOPIC, partitions)
    return await RawClient.connect(broker.port)


async def _init(client: RawClient, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    resp = await client.request(wire.init_producer_id(tid, timeout_ms), 4)
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


async def _produce(client, tid, pid, epoch, seq, values, partition=0) -> int:
    resp = await client.request(
        wire.produce(TOPIC, partition, wire.txn_batch(values, pid, epoch, seq), tid), 9
    )
    return resp.responses[0].partition_responses[0].error_code


async def _fetch(client, offset, isolation, partition=0):
    resp = await client.request(wire.fetch(TOPIC, partition, offset, isolation), 11)
    data = resp.responses[0].partitions[0]
    values = [r.value for b in decode_batches(bytes(data.records)) if b.control is None for r in b.records]
    return data, values


def _end_code(resp) -> int:
    return resp.error_code


def test_find_coordinator_answers_this_broker_for_transactional_ids(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            resp = await client.request(wire.find_coordinator("my-tid", 1), 4)
            (coord,) = resp.coordinators
            assert (coord.error_code, coord.node_id, coord.port) == (0, 0, broker.port)
            await client.close()

    run(scenario())


def test_init_producer_id_bumps_the_epoch_and_validates_the_timeout(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            pid, epoch = await _init(client, "tid-a")
            assert epoch == 0
            assert await _init(client, "tid-a") == (pid, 1)
            bad = await client.request(wire.init_producer_id("tid-b", 10**9), 4)
            assert bad.error_code == E.INVALID_TRANSACTION_TIMEOUT
            await client.close()

    run(scenario())


def test_commit_makes_records_visible_to_read_committed_and_moves_the_lso(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-c")
            resp = await client.request(wire.add_partitions("tid-c", pid, epoch, {TOPIC: [0, 1]}), 3)
            codes = [
                p.partition_error_code
                for t in resp.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            assert codes == [0, 0]
            assert await _produce(client, "tid-c", pid, epoch, 0, [b"a", b"b"]) == 0
            data, values = await _fetch(client, 0, isolation=1)
            assert (data.high_watermark, data.last_stable_offset, values) == (2, 0, [])
            _data, values = await _fetch(client, 0, isolation=0)
            assert values == [b"a", b"b"]
            lo = await client.request(wire.latest_offset(TOPIC, 0, 1), 5)
            assert lo.topics[0].partitions[0].offset == 0  # read_committed latest = LSO
            end = await client.request(wire.end_txn("tid-c", pid, epoch, True), 3)
            assert end.error_code == 0
            data, values = await _fetch(client, 0, isolation=1)
            assert values == [b"a", b"b"]
            assert data.last_stable_offset == data.high_watermark == 3  # two records and the marker
            assert data.aborted_transactions == []
            # EndTxn retried after success: same answer, nothing new written.
            again = await client.request(wire.end_txn("tid-c", pid, epoch, True), 3)
            assert again.error_code == 0
            data, _ = await _fetch(client, 0, isolation=0)
            assert data.high_watermark == 3
            # The other partition was in the transaction too: it got a marker.
            data1, _ = await _fetch(client, 0, isolation=0, partition=1)
            assert data1.high_watermark == 1
            await client.close()

    run(scenario())


def test_a_transaction_begun_as_soon_as_end_txn_is_answered_finds_the_last_one_complete(tmp_path):
    """EndTxn is answered before its markers are written; they must still be written before the
    producer's next request is read, or that request would get CONCURRENT_TRANSACTIONS."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker, partitions=1)
            pid, epoch = await _init(client, "tid-next")
            for n in range(5):
                resp = await client.request(wire.add_partitions("tid-next", pid, epoch, {TOPIC: [0]}), 3)
                [[code]] = [
                    [p.partition_error_code for p in t.results_by_partition]
                    for t in resp.results_by_topic_v3_and_below
                ]
                assert code == 0, f"transaction {n}: {ErrorCode(code).name}"
                assert await _produce(client, "tid-next", pid, epoch, n, [b"v%d" % n]) == 0
                assert (await client.request(wire.end_txn("tid-next", pid, epoch, True), 3)).error_code == 0
            data, values = await _fetch(client, 0, isolation=1)
            assert values == [b"v%d" % n for n in range(5)]
            assert data.last_stable_offset == data.high_watermark == 10  # five records, five markers
            described = await client.request(wire.describe(["tid-next"]), 0)
            assert [d.transaction_state for d in described.transaction_states] == ["CompleteCommit"]
            await client.close()

    run(scenario())


def test_abort_returns_aborted_transactions_to_read_committed_fetches(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-d")
            await client.request(wire.add_partitions("tid-d", pid, epoch, {TOPIC: [0]}), 3)
            assert await _produce(client, "tid-d", pid, epoch, 0, [b"x", b"y", b"z"]) == 0
            assert (await client.request(wire.end_txn("tid-d", pid, epoch, False), 3)).error_code == 0
            data, values = await _fetch(client, 0, isolation=1)
            assert values == [b"x", b"y", b"z"]  # the bytes come back; the client drops them
            assert [(a.producer_id, a.first_offset) for a in data.aborted_transactions] == [(pid, 0)]
            assert data.last_stable_offset == 4
            await client.close()

    run(scenario())


def test_kip890_transactional_produce_to_a_partition_not_added_is_rejected(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-e")
            assert await _produce(client, "tid-e", pid, epoch, 0, [b"late"]) == E.INVALID_TXN_STATE
            assert (
                await _produce(client, None, pid, epoch, 0, [b"late"])
                == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
            data, _ = await _fetch(client, 0, isolation=0)
            assert data.high_watermark == 0 and data.last_stable_offset == 0  # nothing hangs
            # verify_only (AddPartitionsToTxn v4+) reports the same without adding
            resp = await client.request(wire.verify_partitions("tid-e", pid, epoch, {TOPIC: [0]}), 4)
            (result,) = resp.results_by_transaction
            assert (
                result.topic_results[0].results_by_partition[0].partition_error_code
                == E.TRANSACTION_ABORTABLE
            )
            await client.close()

    run(scenario())


def test_fencing_a_stale_epoch(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, old = await _init(client, "tid-f")
            await client.request(wire.add_partitions("tid-f", pid, old, {TOPIC: [0]}), 3)
            assert await _produce(client, "tid-f", pid, old, 0, [b"zombie"]) == 0
            # A new instance: the open transaction is aborted under a bumped epoch (CONCURRENT_TRANSACTIONS
            # first, as in Kafka), then the retry bumps again.
            first = await client.request(wire.init_producer_id("tid-f"), 4)
            assert first.error_code in (0, E.CONCURRENT_TRANSACTIONS)
            if first.error_code:
                first = await client.request(wire.init_producer_id("tid-f"), 4)
            assert first.error_code == 0 and first.producer_epoch > old
            fenced = await client.request(wire.end_txn("tid-f", pid, old, True), 3)
            assert fenced.error_code == E.PRODUCER_FENCED
            fenced_v1 = await client.request(wire.end_txn("tid-f", pid, old, True), 1)
            assert fenced_v1.error_code == E.INVALID_PRODUCER_EPOCH
            add = await client.request(wire.add_partitions("tid-f", pid, old, {TOPIC: [0]}), 3)
            assert (
                add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
                == E.PRODUCER_FENCED
            )
            assert await _produce(client, "tid-f", pid, old, 1, [b"zombie2"]) != 0
            data, values = await _fetch(client, 0, isolation=1)
            assert values == [b"zombie"] and [a.producer_id for a in data.aborted_transactions] == [pid]
            await client.close()

    run(scenario())


def test_txn_offset_commit_is_pending_until_the_commit_marker(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-g")
            offsets = {(TOPIC, 0): 42}
            early = await client.request(wire.txn_offset_commit("tid-g", "grp", pid, epoch, offsets), 3)
            assert early.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE  # no AddOffsetsToTxn
            assert (await client.request(wire.add_offsets("tid-g", pid, epoch, "grp"), 3)).error_code == 0
            resp = await client.request(wire.txn_offset_commit("tid-g", "grp", pid, epoch, offsets), 3)
            assert resp.topics[0].partitions[0].error_code == 0
            stable = await client.request(wire.offset_fetch("grp", TOPIC, [0], True), 7)
            assert stable.topics[0].partitions[0].error_code == E.UNSTABLE_OFFSET_COMMIT
            loose = await client.request(wire.offset_fetch("grp", TOPIC, [0], False), 7)
            assert loose.topics[0].partitions[0].committed_offset == -1
            assert (await client.request(wire.end_txn("tid-g", pid, epoch, True), 3)).error_code == 0
            after = await client.request(wire.offset_fetch("grp", TOPIC, [0], True), 7)
            assert (
                after.topics[0].partitions[0].error_code,
                after.topics[0].partitions[0].committed_offset,
            ) == (0, 42)
            await client.close()

    run(scenario())


def test_txn_offset_commit_with_a_generation_to_an_unknown_group_is_illegal_generation(tmp_path):
    """Kafka's validateTransactionalOffsetCommit: a generation for a group that does not exist is
    ILLEGAL_GENERATION at every version (OffsetCommit v9's GROUP_ID_NOT_FOUND is not used here) and
    creates nothing; generation -1 is accepted and creates the group."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-u")
            assert (await client.request(wire.add_offsets("tid-u", pid, epoch, "no-grp"), 3)).error_code == 0
            offsets = {(TOPIC, 0): 9}
            ghost = wire.txn_offset_commit("tid-u", "no-grp", pid, epoch, offsets, generation=3, member="m")
            resp = await client.request(ghost, 3)
            assert resp.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
            assert broker.services.groups.group("no-grp") is None
            bare = wire.txn_offset_commit("tid-u", "no-grp", pid, epoch, offsets, member="m")
            assert (await client.request(bare, 3)).topics[0].partitions[0].error_code == 0
            assert broker.services.groups.group("no-grp") is not None
            assert (await client.request(wire.end_txn("tid-u", pid, epoch, True), 3)).error_code == 0
            await client.close()

    run(scenario())


def test_describe_and_list_transactions_and_state_survives_a_restart(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-h")
            await client.request(wire.add_partitions("tid-h", pid, epoch, {TOPIC: [1]}), 3)
            d = (await client.request(wire.describe(["tid-h", "nope"]), 0)).transaction_states
            assert (d[0].error_code, d[0].transaction_state, d[0].producer_id) == (0, "Ongoing", pid)
            assert [(t.topic, list(t.partitions)) for t in d[0].topics] == [(TOPIC, [1])]
            assert d[1].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
            listed = await client.request(wire.list_txns(states=["Ongoing", "Bogus"]), 1)
            assert [t.transactional_id for t in listed.transaction_states] == ["tid-h"]
            assert list(listed.unknown_state_filters) == ["Bogus"]
            by_pid = await client.request(wire.list_txns(pids=[pid + 1000]), 1)
            assert by_pid.transaction_states == []
            # v2 (KIP-1152): an RE2 pattern matching whole ids; what RE2/J refuses is refused here too.
            for pattern, ids in (("tid-.*", ["tid-h"]), ("tid", []), ("tid-[gh]", ["tid-h"])):
                found = await client.request(wire.list_txns(pattern=pattern), 2)
                assert (found.error_code, [t.transactional_id for t in found.transaction_states]) == (0, ids)
            for bad in ("tid-(", "tid-(?=h).*"):
                refused = await client.request(wire.list_txns(pattern=bad), 2)
                assert refused.error_code == E.INVALID_REGULAR_EXPRESSION
            await client.request(wire.end_txn("tid-h", pid, epoch, True), 3)
            await client.close()
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            d = (await client.request(wire.describe(["tid-h"]), 0)).transaction_states[0]
            assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("CompleteCommit", pid, epoch)
            assert await _init(client, "tid-h") == (pid, epoch + 1)
            await client.close()

    run(scenario())


def test_write_txn_markers_request_completes_a_transaction_on_the_partition(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await _setup(broker)
            pid, epoch = await _init(client, "tid-i")
            await client.request(wire.add_partitions("tid-i", pid, epoch, {TOPIC: [0]}), 3)
            await _produce(client, "tid-i", pid, epoch, 0, [b"m"])
            resp = await client.request(wire.write_markers(pid, epoch, False, TOPIC, [0, 7]), 1)
            codes = [p.error_code for p in resp.markers[0].topics[0].partitions]
            assert codes == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
            data, _ = await _fetch(client, 0, isolation=1)
            assert data.last_stable_offset == data.high_watermark == 2
            assert [a.first_offset for a in data.aborted_transactions] == [0]
            await client.close()

    run(scenario())


def test_txn_offset_commit_is_accepted_while_the_group_completes_a_rebalance(tmp_path):
    """KIP-447: TxnOffsetCommit v3 checks generation and member only, so a member holding the new
    generation commits while the group is CompletingRebalance (OffsetCommit would get
    REBALANCE_IN_PROGRESS); the zombie of the previous generation is fenced."""
    from onceflow.broker.group.requests import JoinRequest
    from onceflow.broker.group.state import GroupState

    def join(groups, member_id: str, answers: list) -> None:
        request = JoinRequest(
            group_id="grp",
            member_id=member_id,
            group_instance_id=None,
            client_id="c",
            client_host="/127.0.0.1",
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            protocol_type="consumer",
            protocols=[("range", b"")],
            require_known_member_id=False,
        )
        groups.join_group(request, answers.append)

    async def scenario():
        async with running_broker(tmp_path, group_initial_rebalance_delay_ms=0) as broker:
            client = await _setup(broker)
            groups = broker.services.groups.coordinator  # the sans-IO coordinator, callbacks and all
            first: list = []
            join(groups, "", first)
            while not first:
                await asyncio.sleep(0.01)
            member, generation = first[0].member_id, first[0].generation_id
            synced: list = []
            groups.sync_group("grp", member, None, generation, {member: b""}, synced.append)
            assert groups.group("grp").state is GroupState.STABLE
            newcomer: list = []
            join(groups, "", newcomer)  # PreparingRebalance until the first member rejoins
            rejoined: list = []
            join(groups, member, rejoined)
            while not (rejoined and newcomer):
                await asyncio.sleep(0.01)
            assert groups.group("grp").state is GroupState.COMPLETING_REBALANCE
            assert rejoined[0].generation_id == generation + 1

            pid, epoch = await _init(client, "tid-r")
            assert (await client.request(wire.add_offsets("tid-r", pid, epoch, "grp"), 3)).error_code == 0
            stale = wire.txn_offset_commit(
                "tid-r", "grp", pid, epoch, {(TOPIC, 0): 5}, generation=generation, member=member
            )
            resp = await client.request(stale, 3)
            assert resp.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
            current = wire.txn_offset_commit(
                "tid-r", "grp", pid, epoch, {(TOPIC, 0): 5}, generation=generation + 1, member=member
            )
            resp = await client.request(current, 3)
            assert resp.topics[0].partitions[0].error_code == E.NONE
            assert (await client.request(wire.end_txn("tid-r", pid, epoch, True), 3)).error_code == 0
            after = await client.request(wire.offset_fetch("grp", TOPIC, [0], True), 7)
            assert after.topics[0].partitions[0].committed_offset == 5
            await client.close()

    run(scenario())


def _init_v6(tid, *, enable_2pc: bool, keep: bool, timeout_ms: int = 60_000):
    from kafka.protocol.producer import InitProducerIdRequest

    return InitProducerIdRequest(
        transactional_id=tid,
        transaction_timeout_ms=timeout_ms,
        producer_id=-1,
        producer_epoch=-1,
        enable2_pc=enable_2pc,
        keep_prepared_txn=keep,
    )


def test_init_producer_id_v6_two_phase_commit_on_the_wire(tmp_path):
    """KIP-939's fields at InitProducerId v6: refused while the broker's switch is off, a kept
    transaction answered in OngoingTxnProducerId/Epoch, keepPreparedTxn alone refused."""

    async def scenario():
        async with running_broker(tmp_path / "off") as broker:
            client = await _setup(broker)
            resp = await client.request(_init_v6("w-2pc", enable_2pc=True, keep=False), 6)
            assert resp.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            resp = await client.request(_init_v6("w-plain", enable_2pc=False, keep=False), 6)
            assert (resp.error_code, resp.ongoing_txn_producer_id, resp.ongoing_txn_producer_epoch) == (
                0,
                -1,
                -1,
            )
            await client.close()
        async with running_broker(tmp_path / "on", transaction_two_phase_commit_enable=True) as broker:
            client = await _setup(broker)
            resp = await client.request(_init_v6("w-2pc", enable_2pc=False, keep=True), 6)
            assert resp.error_code == E.INVALID_REQUEST
            # No timeout check for a two-phase commit producer (Kafka's client sends its default).
            first = await client.request(_init_v6("w-2pc", enable_2pc=True, keep=False, timeout_ms=10**9), 6)
            assert first.error_code == 0
            pid, epoch = first.producer_id, first.producer_epoch
            add = await client.request(wire.add_partitions("w-2pc", pid, epoch, {TOPIC: [0]}), 3)
            assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            assert await _produce(client, "w-2pc", pid, epoch, 0, [b"held"]) == 0
            kept = await client.request(_init_v6("w-2pc", enable_2pc=True, keep=True), 6)
            assert kept.error_code == 0
            assert (kept.producer_id, kept.producer_epoch) == (pid, epoch + 1)
            assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, epoch)
            data, values = await _fetch(client, 0, 1)
            assert values == [] and data.last_stable_offset == 0  # still open: kept, not aborted
            end = await client.request(wire.end_txn("w-2pc", pid, epoch + 1, True), 3)
            assert end.error_code == 0
            _, values = await _fetch(client, 0, 1)
            assert values == [b"held"]
            await client.close()

    run(scenario())
