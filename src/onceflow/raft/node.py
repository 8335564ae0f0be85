"""The Raft core (KIP-595): one node of the controller quorum, as a sans-IO state machine.

A :class:`RaftNode` is driven by three inputs, each given the current time: ``handle(message)`` for
a request or a response from another node, ``poll()`` for timers, and ``append(records)`` on the
leader. Each returns (or, for ``append``, leaves for the next poll) :class:`Outputs`: messages to
send, events for the listener, and when to poll next. The node never reads a clock, sleeps or
touches a socket; durable writes go through its injected :class:`RaftStorage` before any message
that depends on them is emitted (a vote is on disk before it is granted, a follower's log before it
fetches again, a leader's entries before it counts them).

The protocol is Kafka's (KafkaRaftClient) in our own code: pull-based replication by Fetch, epochs
and votes, BeginQuorumEpoch after an election, EndQuorumEpoch when a leader steps down, snapshots
through FetchSnapshot. Request and response handling is split by subject into ``election`` (Vote,
BeginQuorumEpoch, EndQuorumEpoch) and ``replication`` (Fetch, FetchSnapshot, DescribeQuorum); this
module holds the state, the transitions, the timers and the listener's view of the log.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from onceflow.protocol.errors import ErrorCode
from onceflow.raft.config import RaftConfig
from onceflow.raft.delivery import ListenerView
from onceflow.raft.election import ElectionHandlers
from onceflow.raft.errors import NotLeader, QuorumViolation
from onceflow.raft.leader import LeaderProgress
from onceflow.raft.listener import Event
from onceflow.raft.messages import (
    REQUEST_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
    Outbound,
    VoteRequest,
    VoteResponse,
)
from onceflow.raft.quorum_state import EpochState, Role, check_transition, initial_state
from onceflow.raft.records import Batch
from onceflow.raft.records import LeaderChange as LeaderChangeRecord
from onceflow.raft.replication import ReplicationHandlers
from onceflow.raft.requests import RequestManager
from onceflow.raft.storage import RaftStorage
from onceflow.raft.timers import NEVER, RoleTimers

log = logging.getLogger(__name__)


class Outputs(NamedTuple):
    messages: list[Outbound]
    events: list[Event]
    next_poll_ms: int


class RaftNode(RoleTimers, ElectionHandlers, ReplicationHandlers, ListenerView):
    def __init__(
        self,
        node_id: int,
        voters: Iterable[int] | Mapping[int, object],
        storage: RaftStorage,
        config: RaftConfig | None = None,
        rng: random.Random | None = None,
        *,
        now_ms: int,
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.voters: tuple[int, ...] = tuple(sorted(voters))
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        self.is_voter = node_id in self.voters
        self.storage = storage
        self.config = config or RaftConfig()
        self.cluster_id = cluster_id
        self._rng = rng or random.Random()
        self._requests = RequestManager(
            request_timeout_ms=self.config.request_timeout_ms, retry_backoff_ms=self.config.retry_backoff_ms
        )
        self._outbox: list[Outbound] = []
        self._events: list[Event] = []
        self.high_watermark: int | None = None  # never goes down in a process's life
        self._listener_next: int | None = None  # the next offset the listener expects
        self._listener_behind = False
        self._last_leader_event: tuple[int | None, int] | None = None
        # Per-state data, reset on every transition.
        self.leader: LeaderProgress | None = None
        self._election_deadline_ms = NEVER
        self._fetch_deadline_ms = NEVER
        self._backoff_until_ms: int | None = None
        self._retries = 0
        self._votes: dict[int, bool] = {}
        self._resign_unacked: set[int] = set()
        self._preferred_successors: tuple[int, ...] = ()
        # (leader id, epoch, time) of the last word this node had from a leader other than itself:
        # becoming its follower, or an answer to a Fetch. Kept across transitions, for the controller
        # activated next (it dates the old leader's broker session from it; see QuorumController).
        self.last_leader_contact: tuple[int, int, int] | None = None
        self._init_replication()
        # The leader's accumulator: records appended and not yet written, grouped per append.
        self._pending: list[tuple[bytes, ...]] = []
        self._pending_bytes = 0
        self._pending_since_ms = 0
        self._next_append_offset = 0
        self.state = initial_state(
            storage.read_election(), storage.last_fetched_epoch, local_id=node_id, is_voter=self.is_voter
        )
        storage.write_election(self.state.election(self.voters))
        self._enter_state(None, now_ms)
        log.info(
            "raft node %d starts as %s (log end %s)", node_id, self.state, storage.end_offset_and_epoch()
        )
        if self.voters == (node_id,) and self.state.role is not Role.CANDIDATE:
            self._become_candidate(now_ms)  # the only voter need not wait for an election timeout

    # ------------------------------------------------------------------ inputs

    def handle(self, message: Inbound, now_ms: int) -> Outputs:
        """A request from another node (answered in the outputs) or the response to one of ours."""
        body = message.body
        if isinstance(body, REQUEST_TYPES):
            self._handle_request(message, now_ms)
        elif self._requests.is_expected(message.source, message.correlation_id):
            success = self._handle_response(message, now_ms)
            self._requests.on_response(message.source, message.correlation_id, success=success, now_ms=now_ms)
        else:
            log.debug("node %d drops an unexpected response %s from %d", self.node_id, body, message.source)
        return self.poll(now_ms)

    def poll(self, now_ms: int) -> Outputs:
        """Run the timers due at ``now_ms`` and return everything the node has to say."""
        deadline = self._poll_state(now_ms)
        self._update_listener()
        if self._listener_behind:
            deadline = now_ms
        messages, self._outbox = self._outbox, []
        events, self._events = self._events, []
        return Outputs(messages, events, max(deadline, now_ms) if deadline < NEVER else NEVER)

    def request_failed(self, destination: int, correlation_id: int, now_ms: int) -> Outputs:
        """A request could not be delivered (the driver could not connect, or lost the connection):
        back off and retry. A candidate counts a voter it cannot reach as a refusal in this
        election: when the voters it can reach are split (two candidates after a leader died, each
        voting for itself), it backs off and tries again now rather than after its election timeout
        (a deviation from Kafka, which waits; only liveness depends on it)."""
        expected = self._requests.is_expected(destination, correlation_id)
        self._requests.on_failure(destination, correlation_id, now_ms)
        if expected and self.state.role is Role.CANDIDATE and destination not in self._votes:
            self._votes[destination] = False
            if self._vote_rejected() and self._backoff_until_ms is None:
                log.info(
                    "node %d cannot win epoch %d with the voters it reaches; backing off",
                    self.node_id,
                    self.state.epoch,
                )
                self._start_election_backoff(now_ms)
        return self.poll(now_ms)

    def append(self, records: Sequence[bytes], now_ms: int, *, epoch: int | None = None) -> int:
        """Queue ``records`` to be written as one batch in the leader's current epoch (or in
        ``epoch``, which must be current); returns the offset the last one will have. They are
        written at the next poll once ``controller.quorum.append.linger.ms`` has passed, and
        committed when a majority has them. Raises :class:`NotLeader` on any other node."""
        if self.state.role is not Role.LEADER or (epoch is not None and epoch != self.state.epoch):
            leader = self.state.leader_id if self.state.role is Role.FOLLOWER else None
            raise NotLeader(
                f"node {self.node_id} is {self.state}, not the leader of epoch {epoch or self.state.epoch}",
                leader,
                self.state.epoch,
            )
        group = tuple(records)
        if not group:
            raise ValueError("append needs at least one record")
        for record in group:
            if not isinstance(record, bytes):
                raise TypeError(f"records must be bytes, got {type(record).__name__}")
        if not self._pending:
            self._pending_since_ms = now_ms
        self._pending.append(group)
        self._pending_bytes += sum(len(r) for r in group)
        self._next_append_offset += len(group)
        return self._next_append_offset - 1

    def resign(self, now_ms: int) -> Outputs:
        """Step down as leader (a graceful shutdown): tell the voters with EndQuorumEpoch, most up to
        date first, so that one of them takes over without waiting for a timeout."""
        if self.state.role is Role.LEADER:
            self._resign(now_ms)
        return self.poll(now_ms)

    def ready_to_stop(self, now_ms: int) -> bool:
        """Whether a resigned leader has told the voters (or given up): the process may exit."""
        return (
            self.state.role is not Role.RESIGNED
            or not self._resign_unacked
            or now_ms >= self._election_deadline_ms
        )

    # ------------------------------------------------------------------ views

    @property
    def next_append_offset(self) -> int:
        """The offset the leader's next ``append`` will give its first record (what a controller
        that becomes active writes from)."""
        if self.state.role is not Role.LEADER:
            raise NotLeader(f"node {self.node_id} is {self.state}", None, self.state.epoch)
        return self._next_append_offset

    @property
    def resign_unacknowledged(self) -> frozenset[int]:
        """The voters a resigned leader has not yet heard acknowledge its EndQuorumEpoch."""
        return frozenset(self._resign_unacked)

    @property
    def has_pending_appends(self) -> bool:
        """Whether appended records wait for ``append.linger.ms`` before they are written."""
        return bool(self._pending)

    @property
    def leader_and_epoch(self) -> tuple[int | None, int]:
        state = self.state
        if state.role in (Role.LEADER, Role.FOLLOWER):
            return state.leader_id, state.epoch
        return None, state.epoch

    def __repr__(self) -> str:
        return f"RaftNode({self.node_id}, {self.state}, hw={self.high_watermark})"

    # ------------------------------------------------------------------ dispatch

    def _handle_request(self, message: Inbound, now_ms: int) -> None:
        body = message.body
        if isinstance(body, VoteRequest):
            response = self._on_vote_request(body, now_ms)
        elif isinstance(body, BeginQuorumEpochRequest):
            response = self._on_begin_quorum_epoch_request(body, now_ms)
        elif isinstance(body, EndQuorumEpochRequest):
            response = self._on_end_quorum_epoch_request(body, now_ms)
        elif isinstance(body, FetchRequest):
            response = self._on_fetch_request(message, now_ms)  # None: parked until data or timeout
        elif isinstance(body, FetchSnapshotRequest):
            response = self._on_fetch_snapshot_request(body, now_ms)
        elif isinstance(body, DescribeQuorumRequest):
            response = self._on_describe_quorum_request(now_ms)
        else:  # pragma: no cover - REQUEST_TYPES lists exactly these
            raise TypeError(f"unknown request {body!r}")
        if response is not None:
            self._respond(message, response)

    def _respond(self, request: Inbound, body) -> None:
        self._outbox.append(Outbound(request.source, request.correlation_id, body, request.reply_to))

    def _handle_response(self, message: Inbound, now_ms: int) -> bool:
        body = message.body
        if isinstance(body, VoteResponse):
            return self._on_vote_response(message.source, body, now_ms)
        if isinstance(body, BeginQuorumEpochResponse):
            return self._on_begin_quorum_epoch_response(message.source, body, now_ms)
        if isinstance(body, EndQuorumEpochResponse):
            return self._on_end_quorum_epoch_response(message.source, body, now_ms)
        if isinstance(body, FetchResponse):
            return self._on_fetch_response(message.source, body, now_ms)
        if isinstance(body, FetchSnapshotResponse):
            return self._on_fetch_snapshot_response(message.source, body, now_ms)
        log.warning("node %d got an unexpected response %r", self.node_id, body)
        return False

    def _send(self, destination: int, body_factory, now_ms: int) -> int:
        """Send the request ``body_factory()`` to ``destination`` unless one is in flight there or a
        backoff runs; returns when ``destination`` can next be sent to."""
        if self._requests.is_ready(destination, now_ms):
            correlation_id = self._requests.on_sent(destination, now_ms)
            self._outbox.append(Outbound(destination, correlation_id, body_factory()))
        return self._requests.ready_at(destination)

    # ------------------------------------------------------------------ responses common to all RPCs

    def _handle_common_response(self, error: int, leader_id: int, epoch: int, now_ms: int) -> bool | None:
        """What every response says about the epoch and its leader (Kafka's
        ``maybeHandleCommonResponse``): True/False when that settles the response (handled, or
        back off), None when the RPC's own handling should go on."""
        leader = None if leader_id < 0 else leader_id
        if epoch < self.state.epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True  # we know a later epoch: the answer is stale
        if (
            epoch > self.state.epoch
            or error == ErrorCode.FENCED_LEADER_EPOCH
            or error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        ):
            self._maybe_transition(leader, epoch, now_ms)
            return True
        if leader is not None and self.state.leader_id is None and self.state.role is not Role.RESIGNED:
            self._become_follower(epoch, leader, now_ms)
            return None if error == ErrorCode.NONE else True
        if error == ErrorCode.BROKER_NOT_AVAILABLE:
            return False
        if error == ErrorCode.INVALID_REQUEST:
            log.error("node %d: a peer found our request invalid", self.node_id)
            return False
        return None

    def _maybe_transition(self, leader: int | None, epoch: int, now_ms: int) -> None:
        """Follow what a request or response says about ``epoch`` and its leader."""
        state = self.state
        if (
            leader is not None
            and epoch == state.epoch
            and state.leader_id is not None
            and leader != state.leader_id
        ):
            raise QuorumViolation(
                f"node {self.node_id} ({state}) hears that {leader} leads epoch {epoch}: two leaders in one epoch"
            )
        if leader == self.node_id and not (
            epoch == state.epoch and state.role in (Role.LEADER, Role.RESIGNED)
        ):
            if epoch >= state.epoch:
                raise QuorumViolation(f"node {self.node_id} ({state}) is told it leads epoch {epoch}")
            return
        if epoch > state.epoch:
            if leader is not None:
                self._become_follower(epoch, leader, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
        elif leader is not None and state.leader_id is None and state.role is not Role.RESIGNED:
            self._become_follower(epoch, leader, now_ms)

    # ------------------------------------------------------------------ transitions

    def _transition(self, target: EpochState, now_ms: int, *, durable: bool = True) -> None:
        check_transition(self.state, target, local_id=self.node_id, is_voter=self.is_voter)
        if durable:
            # On disk before anything that depends on it (a vote, an acknowledgement) goes out.
            self.storage.write_election(target.election(self.voters))
        previous = self.state
        self.state = target
        log.info("node %d: %s -> %s", self.node_id, previous, target)
        self._leave_state(previous)
        self._enter_state(previous, now_ms)

    def _leave_state(self, previous: EpochState) -> None:
        self._requests.reset_all()
        if previous.role is Role.LEADER:
            self._fail_parked_fetches()
            self.leader = None
            self._pending.clear()
            self._pending_bytes = 0
        self._votes = {}
        self._backoff_until_ms = None
        self._resign_unacked = set()
        self._fetching_snapshot = None

    def _enter_state(self, previous: EpochState | None, now_ms: int) -> None:
        role = self.state.role
        self._fetch_deadline_ms = NEVER
        if role is Role.FOLLOWER:
            self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
            self._election_deadline_ms = NEVER
            self.last_leader_contact = (self.state.leader_id, self.state.epoch, now_ms)
        elif role in (Role.UNATTACHED, Role.VOTED):
            keep = (
                previous is not None
                and previous.role in (Role.UNATTACHED, Role.CANDIDATE)
                and role is Role.UNATTACHED
            )
            if not self.is_voter:
                self._election_deadline_ms = NEVER
            elif not keep:
                self._election_deadline_ms = now_ms + self._random_election_timeout()
        elif role in (Role.CANDIDATE, Role.RESIGNED):
            self._election_deadline_ms = now_ms + self._random_election_timeout()
            if role is Role.CANDIDATE:
                self._votes = {self.node_id: True}
        else:
            self._election_deadline_ms = NEVER
        self._maybe_fire_leader_change()

    def _random_election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randrange(timeout) if timeout > 0 else 0

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self._transition(EpochState(Role.UNATTACHED, epoch), now_ms)

    def _become_follower(self, epoch: int, leader: int, now_ms: int) -> None:
        self._transition(EpochState(Role.FOLLOWER, epoch, leader_id=leader), now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        retries = self._retries + 1 if self.state.role is Role.CANDIDATE else 1
        self._transition(EpochState(Role.CANDIDATE, self.state.epoch + 1, voted_id=self.node_id), now_ms)
        self._retries = retries
        self._maybe_become_leader(now_ms)

    def _maybe_become_leader(self, now_ms: int) -> None:
        granted = sum(1 for v in self.voters if self._votes.get(v) is True)
        if self.state.role is Role.CANDIDATE and granted * 2 > len(self.voters):
            granting = frozenset(v for v, yes in self._votes.items() if yes)
            self._become_leader(granting, now_ms)

    def _become_leader(self, granting: frozenset[int], now_ms: int) -> None:
        epoch = self.state.epoch
        start = self.storage.log_end_offset
        leader = LeaderProgress(
            local_id=self.node_id,
            epoch=epoch,
            epoch_start_offset=start,
            voters=self.voters,
            granting_voters=granting,
            config=self.config,
            now_ms=now_ms,
        )
        self._transition(EpochState(Role.LEADER, epoch, leader_id=self.node_id), now_ms)
        self.leader = leader
        # The first entry of the epoch: once it is committed, so is everything before it.
        record = LeaderChangeRecord(self.node_id, self.voters, tuple(sorted(granting)))
        self.storage.append([Batch(start, epoch, now_ms, (), record)])
        self.storage.flush()
        self._next_append_offset = start + 1
        self._on_leader_log_flushed(now_ms)
        log.info(
            "node %d leads epoch %d from offset %d (votes of %s)",
            self.node_id,
            epoch,
            start,
            sorted(granting),
        )

    def _resign(self, now_ms: int) -> None:
        assert self.leader is not None
        successors = tuple(self.leader.voters_by_descending_end_offset())
        self._transition(
            EpochState(Role.RESIGNED, self.state.epoch, leader_id=self.node_id), now_ms, durable=False
        )
        self._preferred_successors = successors
        self._resign_unacked = set(successors)
