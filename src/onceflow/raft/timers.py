"""The timers of a :class:`RaftNode` (mixed into it): what each role does when polled.

A leader writes what ``append`` gathered once ``controller.quorum.append.linger.ms`` has passed,
announces itself with BeginQuorumEpoch to voters not fetching from it, answers fetches whose wait
is over, and resigns when check-quorum expires. A candidate asks for votes, backs off after a lost
or timed-out election and stands again. A follower fetches, and stands for election after
``controller.quorum.fetch.timeout.ms`` without an answer from its leader (an observer looks for the
leader through any voter instead). An unattached or voted voter stands when its election timeout
runs out; a resigned leader repeats EndQuorumEpoch until acknowledged. Each returns when it next
needs to be polled.
"""

from __future__ import annotations

import logging

from onceflow.raft.config import MAX_BATCH_SIZE_BYTES
from onceflow.raft.messages import BeginQuorumEpochRequest
from onceflow.raft.quorum_state import Role
from onceflow.raft.records import Batch

log = logging.getLogger(__name__)

NEVER = 2**62  # a deadline that does not come


class RoleTimers:
    def _poll_state(self, now_ms: int) -> int:
        role = self.state.role
        if role is Role.LEADER:
            return self._poll_leader(now_ms)
        if role is Role.CANDIDATE:
            return self._poll_candidate(now_ms)
        if role is Role.FOLLOWER:
            return self._poll_follower(now_ms)
        if role is Role.RESIGNED:
            return self._poll_resigned(now_ms)
        return self._poll_unattached(now_ms)

    def _poll_leader(self, now_ms: int) -> int:
        leader = self.leader
        assert leader is not None
        if leader.check_quorum_expired(now_ms):
            log.warning(
                "node %d resigns as leader of epoch %d: no Fetch from a majority of voters for %d ms",
                self.node_id,
                self.state.epoch,
                int(self.config.fetch_timeout_ms * 1.5),
            )
            self._resign(now_ms)
            return now_ms
        deadlines = [leader.check_quorum_deadline_ms if len(self.voters) > 1 else NEVER]
        if self._pending:
            due = self._pending_since_ms + self.config.append_linger_ms
            if now_ms >= due or self._pending_bytes >= MAX_BATCH_SIZE_BYTES:
                self._write_pending(now_ms)
            else:
                deadlines.append(due)
        if now_ms >= leader.next_begin_quorum_ms:
            # To every voter not fetching from us lately: one that restarted on an empty disk, or
            # missed the first announcement, learns of this leader without an election of its own.
            quiet_since = now_ms - leader.begin_quorum_interval_ms
            for voter in self.voters:
                if voter != self.node_id and leader.voters[voter].last_fetch_ms < quiet_since:
                    self._send(
                        voter,
                        lambda: BeginQuorumEpochRequest(self.node_id, self.state.epoch, self.cluster_id),
                        now_ms,
                    )
            leader.next_begin_quorum_ms = now_ms + leader.begin_quorum_interval_ms
        deadlines.append(leader.next_begin_quorum_ms)
        deadlines.append(self._expire_parked_fetches(now_ms))
        return min(deadlines)

    def _write_pending(self, now_ms: int) -> None:
        """Write the accumulated appends as batches (each append whole), flush, count them."""
        offset = self.storage.log_end_offset
        epoch = self.state.epoch
        batches: list[Batch] = []
        current: list[bytes] = []
        size = 0
        for group in self._pending:
            group_size = sum(len(r) for r in group)
            if current and size + group_size > MAX_BATCH_SIZE_BYTES:
                batches.append(Batch(offset, epoch, self._pending_since_ms, tuple(current)))
                offset += len(current)
                current, size = [], 0
            current.extend(group)
            size += group_size
        if current:
            batches.append(Batch(offset, epoch, self._pending_since_ms, tuple(current)))
        self._pending.clear()
        self._pending_bytes = 0
        self.storage.append(batches)
        self.storage.flush()
        self._on_leader_log_flushed(now_ms)

    def _on_leader_log_flushed(self, now_ms: int) -> None:
        leader = self.leader
        assert leader is not None
        if leader.update_local_end(self.storage.log_end_offset):
            self._on_leader_high_watermark(now_ms)
        self._complete_parked_fetches(now_ms)

    def _on_leader_high_watermark(self, now_ms: int) -> None:
        assert self.leader is not None and self.leader.high_watermark is not None
        self._raise_high_watermark(self.leader.high_watermark)

    def _raise_high_watermark(self, offset: int) -> None:
        if self.high_watermark is None or offset > self.high_watermark:
            self.high_watermark = offset

    def _poll_candidate(self, now_ms: int) -> int:
        if self._backoff_until_ms is not None:
            if now_ms >= self._backoff_until_ms:
                log.info("node %d stands for election again after its backoff", self.node_id)
                self._become_candidate(now_ms)
                return now_ms
            return self._backoff_until_ms
        if now_ms >= self._election_deadline_ms:
            self._start_election_backoff(now_ms)
            return self._backoff_until_ms  # type: ignore[return-value]
        deadline = self._election_deadline_ms
        if not self._vote_rejected():
            for voter in self.voters:
                if voter != self.node_id and voter not in self._votes:
                    deadline = min(deadline, self._send(voter, self._vote_request, now_ms))
        return deadline

    def _poll_follower(self, now_ms: int) -> int:
        if self.is_voter and now_ms >= self._fetch_deadline_ms:
            log.info(
                "node %d: no answer from leader %s for a fetch timeout; standing for election",
                self.node_id,
                self.state.leader_id,
            )
            self._become_candidate(now_ms)
            return now_ms
        leader_id = self.state.leader_id
        assert leader_id is not None
        if not self.is_voter and (
            now_ms >= self._fetch_deadline_ms or self._requests.has_timed_out(leader_id, now_ms)
        ):
            # An observer that lost its leader looks for the current one through any voter.
            return min(self._fetch_from_any_voter(now_ms), now_ms + self.config.fetch_timeout_ms)
        deadline = self._send_fetch(leader_id, now_ms)
        return min(deadline, self._fetch_deadline_ms)

    def _poll_unattached(self, now_ms: int) -> int:
        if not self.is_voter:
            return self._fetch_from_any_voter(now_ms)
        if now_ms >= self._election_deadline_ms:
            self._become_candidate(now_ms)
            return now_ms
        return self._election_deadline_ms

    def _poll_resigned(self, now_ms: int) -> int:
        deadline = self._election_deadline_ms
        for voter in sorted(self._resign_unacked):
            deadline = min(deadline, self._send(voter, self._end_quorum_epoch_request, now_ms))
        if now_ms >= self._election_deadline_ms:
            self._become_candidate(now_ms)
            return now_ms
        return deadline

    def _fetch_from_any_voter(self, now_ms: int) -> int:
        inflight_timeout = self._requests.first_timeout(now_ms)
        if inflight_timeout is not None:
            return inflight_timeout
        ready = [v for v in self.voters if self._requests.is_ready(v, now_ms)]
        if ready:
            return self._send_fetch(self._rng.choice(ready), now_ms)
        return min(self._requests.ready_at(v) for v in self.voters)
