"""Elections: the Vote, BeginQuorumEpoch and EndQuorumEpoch RPCs of a :class:`RaftNode` (mixed into
it; ``node`` holds the state they read and change).

A voter grants at most one vote per epoch, and only to a candidate whose log is at least as up to
date as its own (compared by last epoch, then log end offset). The vote is written to
``quorum-state`` before the answer leaves. A candidate that has lost (a majority refused) or timed
out waits an exponential, randomised backoff (at most ``controller.quorum.election.backoff.max.ms``)
before trying the next epoch. A new leader announces itself with BeginQuorumEpoch until each voter
has acknowledged it; a leader that steps down sends EndQuorumEpoch with its preferred successors
(most up to date first): the first of them stands for election at once, the others after a backoff
that grows with their place in the list.
"""

from __future__ import annotations

import logging

from onceflow.protocol.errors import ErrorCode
from onceflow.raft.config import ELECTION_BACKOFF_BASE_MS
from onceflow.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    VoteRequest,
    VoteResponse,
)
from onceflow.raft.quorum_state import EpochState, Role
from onceflow.raft.records import OffsetAndEpoch

log = logging.getLogger(__name__)


class ElectionHandlers:
    # --- Vote ---

    def _vote_request(self) -> VoteRequest:
        end = self.storage.end_offset_and_epoch()
        return VoteRequest(self.state.epoch, self.node_id, end.epoch, end.offset, self.cluster_id)

    def _vote_response(self, error: int, granted: bool = False) -> VoteResponse:
        leader = (
            self.state.leader_id if self.state.role in (Role.LEADER, Role.FOLLOWER, Role.RESIGNED) else None
        )
        return VoteResponse(int(error), NO_LEADER if leader is None else leader, self.state.epoch, granted)

    def _on_vote_request(self, request: VoteRequest, now_ms: int) -> VoteResponse:
        if self.cluster_id is not None and request.cluster_id not in (None, self.cluster_id):
            return self._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID)
        if (
            request.last_offset < 0
            or request.last_offset_epoch < 0
            or request.last_offset_epoch >= request.candidate_epoch
        ):
            return self._vote_response(ErrorCode.INVALID_REQUEST)
        if request.candidate_epoch < self.state.epoch:
            return self._vote_response(ErrorCode.FENCED_LEADER_EPOCH)
        if request.candidate_id not in self.voters or request.candidate_id < 0:
            return self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET)
        if request.candidate_epoch > self.state.epoch:
            self._become_unattached(request.candidate_epoch, now_ms)
        if not self.is_voter:
            return self._vote_response(ErrorCode.NONE)  # observers do not vote
        candidate_end = OffsetAndEpoch(request.last_offset, request.last_offset_epoch)
        up_to_date = candidate_end >= self.storage.end_offset_and_epoch()
        state = self.state
        if state.role is Role.VOTED:
            granted = state.voted_id == request.candidate_id
        elif state.role is Role.UNATTACHED:
            granted = up_to_date
            if granted:
                self._transition(EpochState(Role.VOTED, state.epoch, voted_id=request.candidate_id), now_ms)
        else:  # a candidate voted for itself; a leader, follower or resigned leader knows the leader
            granted = False
        log.info(
            "node %d %s its vote to %d for epoch %d (candidate log end %s, ours %s)",
            self.node_id,
            "grants" if granted else "refuses",
            request.candidate_id,
            request.candidate_epoch,
            candidate_end,
            self.storage.end_offset_and_epoch(),
        )
        return self._vote_response(ErrorCode.NONE, granted)

    def _on_vote_response(self, source: int, response: VoteResponse, now_ms: int) -> bool:
        handled = self._handle_common_response(
            response.error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        if response.error != ErrorCode.NONE:
            return False
        if self.state.role is not Role.CANDIDATE or source not in self.voters:
            return True
        self._votes[source] = response.vote_granted
        if response.vote_granted:
            self._maybe_become_leader(now_ms)
        elif self._vote_rejected() and self._backoff_until_ms is None:
            log.info("node %d lost the election for epoch %d; backing off", self.node_id, self.state.epoch)
            self._start_election_backoff(now_ms)
        return True

    def _vote_rejected(self) -> bool:
        """Too many refusals for this candidate to win."""
        possible = sum(1 for v in self.voters if self._votes.get(v) is not False)
        return possible * 2 <= len(self.voters)

    def _start_election_backoff(self, now_ms: int) -> None:
        exponent = min(20, max(self._retries, 1) - 1)
        backoff = min(
            ELECTION_BACKOFF_BASE_MS * self._rng.randrange(2 << exponent),
            self.config.election_backoff_max_ms,
        )
        self._backoff_until_ms = now_ms + backoff

    # --- BeginQuorumEpoch ---

    def _on_begin_quorum_epoch_request(
        self, request: BeginQuorumEpochRequest, now_ms: int
    ) -> BeginQuorumEpochResponse:
        error = self._check_voter_only(request.cluster_id, request.leader_id, request.leader_epoch)
        if error == ErrorCode.NONE:
            self._maybe_transition(request.leader_id, request.leader_epoch, now_ms)
        return self._begin_response(error)

    def _begin_response(self, error: int) -> BeginQuorumEpochResponse:
        leader, epoch = self._known_leader()
        return BeginQuorumEpochResponse(int(error), leader, epoch)

    def _on_begin_quorum_epoch_response(
        self, source: int, response: BeginQuorumEpochResponse, now_ms: int
    ) -> bool:
        handled = self._handle_common_response(
            response.error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        if response.error != ErrorCode.NONE:
            return False
        if self.state.role is Role.LEADER and self.leader is not None:
            self.leader.acknowledge(source)
        return True

    # --- EndQuorumEpoch ---

    def _end_quorum_epoch_request(self) -> EndQuorumEpochRequest:
        return EndQuorumEpochRequest(
            self.node_id, self.state.epoch, self._preferred_successors, self.cluster_id
        )

    def _on_end_quorum_epoch_request(
        self, request: EndQuorumEpochRequest, now_ms: int
    ) -> EndQuorumEpochResponse:
        error = self._check_voter_only(request.cluster_id, request.leader_id, request.leader_epoch)
        if error == ErrorCode.NONE:
            self._maybe_transition(request.leader_id, request.leader_epoch, now_ms)
            state = self.state
            if state.role is Role.FOLLOWER and state.leader_id == request.leader_id and self.is_voter:
                backoff = self._end_epoch_backoff(request.preferred_successors)
                log.info(
                    "node %d: leader %d of epoch %d resigns; standing for election in %d ms",
                    self.node_id,
                    request.leader_id,
                    request.leader_epoch,
                    backoff,
                )
                self._fetch_deadline_ms = now_ms + backoff
        leader, epoch = self._known_leader()
        return EndQuorumEpochResponse(int(error), leader, epoch)

    def _end_epoch_backoff(self, successors: tuple[int, ...]) -> int:
        """The first preferred successor goes at once; later ones wait longer the further down the
        list they are (Kafka's strict exponential backoff); a voter not listed waits the longest."""
        maximum = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return maximum
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        base = maximum >> (len(successors) - 1)
        return min(maximum, base << (position - 1))

    def _on_end_quorum_epoch_response(
        self, source: int, response: EndQuorumEpochResponse, now_ms: int
    ) -> bool:
        handled = self._handle_common_response(
            response.error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        if response.error != ErrorCode.NONE:
            return False
        if self.state.role is Role.RESIGNED:
            self._resign_unacked.discard(source)
        return True

    # --- shared ---

    def _check_voter_only(self, cluster_id: str | None, sender: int, epoch: int) -> int:
        """Kafka's checks of Vote, BeginQuorumEpoch and EndQuorumEpoch requests."""
        if self.cluster_id is not None and cluster_id not in (None, self.cluster_id):
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if epoch < self.state.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if sender < 0:
            return ErrorCode.INVALID_REQUEST
        if sender not in self.voters:
            return ErrorCode.INCONSISTENT_VOTER_SET
        return ErrorCode.NONE

    def _known_leader(self) -> tuple[int, int]:
        leader = (
            self.state.leader_id if self.state.role in (Role.LEADER, Role.FOLLOWER, Role.RESIGNED) else None
        )
        return (NO_LEADER if leader is None else leader), self.state.epoch
