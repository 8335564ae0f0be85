"""What the consumer does with each OffsetCommit error: the pure mapping (no broker), what a refused
commit does to a classic member (no broker), and GROUP_ID_NOT_FOUND end to end against our broker."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kafka.protocol.consumer import JoinGroupResponse, SyncGroupResponse
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess

from onceflow.client import AdminClient, AsyncClient
from onceflow.client.consumer import AsyncConsumer, CommitFailed, RebalanceInProgress
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.consumer.classic.assignors import Assignment, RangeAssignor, encode_assignment
from onceflow.client.consumer.classic.membership import Action, GroupMembership, MemberState, SyncResult
from onceflow.client.consumer.kip848.membership import Reconciliation
from onceflow.client.consumer.offset_commit import CommitErrorAction as A
from onceflow.client.consumer.offset_commit import ConsumerTimeout, commit_error_action
from onceflow.client.producer import AsyncProducer
from onceflow.protocol.errors import CoordinatorNotAvailable, KafkaError
from onceflow.protocol.errors import ErrorCode as E

# Kafka's consumers (ConsumerCoordinator.OffsetCommitResponseHandler, CommitRequestManager):
KAFKAS_RULES = {
    E.COORDINATOR_NOT_AVAILABLE: A.FIND_COORDINATOR,  # mark the coordinator unknown, retry
    E.NOT_COORDINATOR: A.FIND_COORDINATOR,
    E.REQUEST_TIMED_OUT: A.FIND_COORDINATOR,
    E.NETWORK_EXCEPTION: A.FIND_COORDINATOR,  # a connection lost mid-request (Kafka: a disconnect)
    E.COORDINATOR_LOAD_IN_PROGRESS: A.RETRY,  # "just retry"
    E.UNKNOWN_TOPIC_OR_PARTITION: A.RETRY,
    E.STALE_MEMBER_EPOCH: A.REFRESH_EPOCH,
    E.REBALANCE_IN_PROGRESS: A.REJOIN,  # RebalanceInProgressException, generation kept
    E.UNKNOWN_MEMBER_ID: A.FENCED,  # CommitFailedException
    E.ILLEGAL_GENERATION: A.FENCED,
    E.FENCED_INSTANCE_ID: A.FENCED,
    E.FENCED_MEMBER_EPOCH: A.FENCED,
    E.GROUP_ID_NOT_FOUND: A.FENCED,  # v9's answer where v8 said ILLEGAL_GENERATION
    E.OFFSET_METADATA_TOO_LARGE: A.RAISE,  # "raise the error to the user"
    E.INVALID_COMMIT_OFFSET_SIZE: A.RAISE,
    E.GROUP_AUTHORIZATION_FAILED: A.RAISE,
    E.TOPIC_AUTHORIZATION_FAILED: A.RAISE,
    E.NOT_ENOUGH_REPLICAS: A.RAISE,  # unexpected, so raised even though retriable elsewhere
    E.UNKNOWN_SERVER_ERROR: A.RAISE,
}


@pytest.mark.parametrize("code", list(KAFKAS_RULES), ids=lambda c: c.name)
def test_each_offset_commit_error_gets_kafkas_treatment(code):
    assert commit_error_action(code) is KAFKAS_RULES[code]


def stable_member(generation: int = 3) -> GroupMembership:
    m = GroupMembership("g", [RangeAssignor()])
    m.join_request(["t"])
    m.on_join_response(
        JoinGroupResponse(
            error_code=0,
            generation_id=generation,
            protocol_name="range",
            leader="other",
            member_id="me",
            members=[],
        )
    )
    m.on_sync_response(
        SyncGroupResponse(error_code=0, assignment=encode_assignment(Assignment([TP("t", 0), TP("t", 1)])))
    )
    assert m.state is MemberState.STABLE and not m.rejoin_needed
    return m


@pytest.mark.parametrize(
    ("code", "keeps_member_id"),
    [
        (E.UNKNOWN_MEMBER_ID, False),
        (E.GROUP_ID_NOT_FOUND, False),
        (E.FENCED_INSTANCE_ID, False),
        (E.ILLEGAL_GENERATION, True),  # only the generation is over (Kafka keeps the id)
    ],
)
def test_a_refused_commit_ends_the_generation_the_member_is_still_in(code, keeps_member_id):
    m = stable_member()
    m.on_commit_refused(code, 3, "me")
    assert m.lost and m.rejoin_needed and m.state is MemberState.UNJOINED
    assert m.lose_partitions() == [TP("t", 0), TP("t", 1)]  # what the next poll reports lost
    m.reset_member()
    assert m.generation_id == -1
    assert m.member_id == ("me" if keeps_member_id else "")
    assert m.join_request(["t"]).member_id == m.member_id


def test_rebalance_in_progress_asks_for_a_rejoin_in_the_same_generation():
    m = stable_member()
    m.on_commit_refused(E.REBALANCE_IN_PROGRESS, 3, "me")
    assert m.rejoin_needed and not m.lost
    assert (m.generation_id, m.member_id, m.owned) == (3, "me", [TP("t", 0), TP("t", 1)])


@pytest.mark.parametrize("sent", [(2, "me"), (3, "someone-else"), (-1, "")])
def test_a_refusal_of_another_generations_commit_leaves_the_member_alone(sent):
    """The answer to a commit sent before the member moved on (or outside any generation)."""
    m = stable_member()
    m.on_commit_refused(E.ILLEGAL_GENERATION, *sent)
    assert not m.lost and not m.rejoin_needed and m.state is MemberState.STABLE


class ScriptedCoordinator:
    """Stands in for the group coordinator: each commit raises the next scripted error (None: succeeds)."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)
        self.commits: list[dict] = []
        self.last_poll = 0.0

    async def commit(self, offsets, *, deadline):
        self.commits.append(dict(offsets))
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error


class IdleFetcher:
    async def ensure_running(self) -> None:
        pass


INTERVAL_S, BACKOFF_S = 60.0, 0.1


@pytest.mark.parametrize(
    "retriable",
    [ConsumerTimeout("no coordinator by poll's deadline"), CoordinatorNotAvailable("the coordinator moves")],
    ids=lambda e: type(e).__name__,
)
def test_a_retriable_auto_commit_failure_is_retried_after_retry_backoff_not_a_whole_interval(retriable):
    """Kafka's maybeAutoCommitOffsetsAsync: after a retriable failure (RetriableCommitFailedException)
    the next auto commit is due in retry.backoff.ms; after a success or any other failure, in
    auto.commit.interval.ms. Poll's work is driven directly with a stand-in coordinator, and the
    schedule it leaves is read, not waited for."""
    tp = TP("t", 0)

    async def run():
        consumer = AsyncConsumer(
            bootstrap_servers="127.0.0.1:1",  # never contacted
            group_id="g",
            auto_commit_interval_ms=int(INTERVAL_S * 1000),
            retry_backoff_ms=int(BACKOFF_S * 1000),
        )
        consumer.assign([tp])
        coordinator = consumer._coordinator = ScriptedCoordinator(
            retriable,
            None,
            KafkaError("not allowed", E.GROUP_AUTHORIZATION_FAILED),
            CommitFailed("the group rebalanced", E.ILLEGAL_GENERATION),
        )
        consumer._fetcher = IdleFetcher()

        async def auto_commit_at(position: int) -> tuple[float, float]:
            """One poll's work with an auto commit due; (when it started, when the next is due)."""
            consumer._subscriptions.state(tp).seek(position)
            consumer._next_auto_commit = 0.0
            started = time.monotonic()
            await consumer._prepare(started)
            assert coordinator.commits[-1] == {tp: (position, "")}
            return started, consumer._next_auto_commit

        try:
            _, due = await auto_commit_at(5)  # the retriable failure
            assert due <= time.monotonic() + BACKOFF_S
            started, due = await auto_commit_at(5)  # the retry succeeds
            assert due >= started + INTERVAL_S
            for position in (6, 7):  # a non-retriable failure, then a refused one: no early retry
                started, due = await auto_commit_at(position)
                assert due >= started + INTERVAL_S
            assert len(coordinator.commits) == 4
        finally:
            await consumer._client.close()

    asyncio.run(run())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_new_assignment_reschedules_the_auto_commit_a_whole_interval_from_now(protocol):
    """Kafka's ConsumerCoordinator.onJoinComplete resets the auto-commit timer to
    auto.commit.interval.ms from now after every completed round (even one that kept the
    assignment), and the new consumer's signalReconciliationCompleting after each reconciliation. The
    coordinator's end of a round (or reconciliation) is driven directly, and the schedule read."""
    tp = TP("t", 0)

    async def run():
        consumer = AsyncConsumer(
            bootstrap_servers="127.0.0.1:1",  # never contacted
            group_id="g",
            group_protocol=protocol,
            auto_commit_interval_ms=int(INTERVAL_S * 1000),
        )

        async def no_connection():
            return None

        consumer._client.any_connection = no_connection
        await consumer.start()  # wires the coordinator's callbacks to the consumer
        coordinator = consumer._coordinator
        try:
            consumer._next_auto_commit = 0.0  # overdue
            started = time.monotonic()
            if protocol == "classic":
                # A round that ended with the same assignment: nothing added, nothing revoked.
                await coordinator._end_round(SyncResult(Action.NONE, assigned=[tp], added=[]))
            else:
                coordinator.membership.reconciliation = lambda: Reconciliation([], [tp])
                await coordinator._reconcile()
            assert consumer._next_auto_commit >= started + INTERVAL_S
        finally:
            await consumer._client.close()

    asyncio.run(run())


# -- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("commit-errors"),
        extra_args=["--config", "group.initial.rebalance.delay.ms=0"],
    )
    proc.start()
    yield proc
    proc.stop()


def drop_group_once_empty(bootstrap: str, group: str) -> None:
    deadline = time.monotonic() + 30
    with AdminClient(bootstrap) as admin:
        while admin.describe_group(group).state != "Empty":
            assert time.monotonic() < deadline, "the coordinator never expired the stalled member"
            time.sleep(0.2)
        admin.delete_group(group)


def test_a_commit_to_a_group_the_coordinator_no_longer_has_fails_and_the_member_rejoins(broker):
    """The member's process stalls past session.timeout.ms; the coordinator expires it and the empty
    group is deleted. Its commit, still naming generation 1, gets GROUP_ID_NOT_FOUND (OffsetCommit v9):
    CommitFailed, not a generic error; the next polls report the partitions lost and rejoin."""
    topic, group = topic_name("gone-group"), topic_name("gone-group-g")
    values = [b"%d" % i for i in range(6)]
    lost: list = []

    async def run():
        async with AsyncClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=2)
        async with AsyncProducer({"bootstrap.servers": broker.bootstrap}) as producer:
            await asyncio.gather(
                *[await producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)]
            )
        c = AsyncConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            on_lost=lost.extend,
        )
        read: list = []
        try:
            deadline = time.monotonic() + 30
            while len(read) < 6 and time.monotonic() < deadline:
                read.extend(await c.poll(timeout_ms=200))
            before = c.group_metadata()
            owned = c.assignment()
            # The stall: this event loop, and so the member's heartbeats, stops while another thread
            # waits for the coordinator to expire the member, then deletes the empty group.
            dropper = threading.Thread(target=drop_group_once_empty, args=(broker.bootstrap, group))
            dropper.start()
            dropper.join()
            with pytest.raises(CommitFailed) as refused:
                await c.commit({TP(topic, 0): 3, TP(topic, 1): 3})
            again: list = []
            while len(again) < 6 and time.monotonic() < deadline + 60:
                again.extend(await c.poll(timeout_ms=200))
            return before, owned, refused.value, again, c.group_metadata()
        finally:
            await c.close()

    before, owned, refused, again, after = asyncio.run(run())
    assert refused.code is E.GROUP_ID_NOT_FOUND and not isinstance(refused, RebalanceInProgress)
    assert set(lost) == owned == {TP(topic, 0), TP(topic, 1)}
    assert after.generation_id >= 1 and after.member_id != before.member_id  # a new member of a new group
    assert sorted(r.value for r in again) == values  # nothing was committed: read again from the start
