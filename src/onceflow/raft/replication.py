"""Replication: the Fetch, FetchSnapshot and DescribeQuorum RPCs of a :class:`RaftNode` (mixed into
it; ``node`` holds the state they read and change).

Followers pull. A Fetch says where the follower's log ends, ``(fetch offset, last fetched epoch)``;
the leader checks that against its own log: if it matches, the fetch offset is the follower's
acknowledgement of everything below it (the high watermark may move) and the answer carries the
batches from there; if it diverges, the answer names where the follower's log stops matching and the
follower truncates there; if it lies below the leader's log start, the answer names the leader's
latest snapshot and the follower fetches it with FetchSnapshot, in chunks, then starts its log after
it. A Fetch that finds nothing new waits on the leader (up to its ``max_wait_ms``) until an append,
or until the high watermark moves past what the follower last heard (Kafka's raft client waits only
for appends before Fetch v18; a follower here learns of commits at once).

Observers (brokers) fetch the same way with their node id; they count for nothing but DescribeQuorum.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from onceflow.protocol.errors import ErrorCode
from onceflow.raft.errors import QuorumViolation
from onceflow.raft.messages import (
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
)
from onceflow.raft.quorum_state import Role
from onceflow.raft.records import OffsetAndEpoch
from onceflow.raft.snapshot_format import open_snapshot
from onceflow.raft.storage import FetchCheck

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ParkedFetch:
    request: Inbound
    deadline_ms: int


@dataclass(slots=True)
class PartialSnapshot:
    snapshot_id: OffsetAndEpoch
    data: bytearray


class ReplicationHandlers:
    def _init_replication(self) -> None:
        self._parked: list[ParkedFetch] = []
        self._fetching_snapshot: PartialSnapshot | None = None

    # ------------------------------------------------------------------ leader side

    def _check_leader_only(self, cluster_id: str | None, epoch: int) -> int:
        if self.cluster_id is not None and cluster_id not in (None, self.cluster_id):
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if epoch < self.state.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > self.state.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.state.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def _empty_fetch_response(self, error: int) -> FetchResponse:
        leader, epoch = self._known_leader()
        return FetchResponse(int(error), leader, epoch, -1, self.storage.log_start_offset)

    def _on_fetch_request(self, message: Inbound, now_ms: int) -> FetchResponse | None:
        request: FetchRequest = message.body
        if (
            request.max_wait_ms < 0
            or request.fetch_offset < 0
            or request.last_fetched_epoch < 0
            or request.last_fetched_epoch > request.current_leader_epoch
        ):
            return self._empty_fetch_response(ErrorCode.INVALID_REQUEST)
        if request.replica_id == self.node_id:
            return self._empty_fetch_response(ErrorCode.INVALID_REQUEST)
        response = self._try_complete_fetch(request, now_ms)
        if (
            response.error != ErrorCode.NONE
            or response.batches
            or request.max_wait_ms == 0
            or response.diverging_epoch is not None
            or response.snapshot_id is not None
            or (request.replica_id >= 0 and not self.leader.knows_high_watermark(request.replica_id))
        ):
            self._note_sent(request, response)
            return response
        self._parked.append(ParkedFetch(message, now_ms + request.max_wait_ms))
        return None

    def _try_complete_fetch(self, request: FetchRequest, now_ms: int) -> FetchResponse:
        error = self._check_leader_only(request.cluster_id, request.current_leader_epoch)
        if error != ErrorCode.NONE:
            return self._empty_fetch_response(error)
        storage = self.storage
        leader = self.leader
        kind, point = storage.check_fetch(request.fetch_offset, request.last_fetched_epoch)
        batches: tuple = ()
        if kind is FetchCheck.VALID:
            batches = tuple(
                storage.read(request.fetch_offset, min(request.max_bytes, self.config.fetch_max_bytes))
            )
            if request.replica_id >= 0 and leader.update_replica(
                request.replica_id, request.fetch_offset, now_ms
            ):
                self._on_leader_high_watermark(now_ms)
        elif request.replica_id >= 0:
            leader.record_voter_contact(request.replica_id, now_ms)
        hw = -1 if leader.high_watermark is None else leader.high_watermark
        return FetchResponse(
            ErrorCode.NONE,
            self.node_id,
            self.state.epoch,
            hw,
            storage.log_start_offset,
            batches,
            point if kind is FetchCheck.DIVERGING else None,
            point if kind is FetchCheck.SNAPSHOT else None,
        )

    def _note_sent(self, request: FetchRequest, response: FetchResponse) -> None:
        if self.leader is not None and request.replica_id >= 0 and response.error == ErrorCode.NONE:
            self.leader.note_high_watermark_sent(request.replica_id, response.high_watermark)

    def _complete_parked_fetches(self, now_ms: int) -> None:
        """Answer the waiting fetches that now have something to get: new entries, or a high
        watermark their replica has not heard."""
        if not self._parked or self.leader is None:
            return
        end = self.storage.log_end_offset
        still = []
        for parked in self._parked:
            request: FetchRequest = parked.request.body
            if request.fetch_offset < end or not self.leader.knows_high_watermark(request.replica_id):
                response = self._try_complete_fetch(request, now_ms)
                self._note_sent(request, response)
                self._respond(parked.request, response)
            else:
                still.append(parked)
        self._parked = still

    def _expire_parked_fetches(self, now_ms: int) -> int:
        """Answer the fetches whose wait is over; returns when the next one's is."""
        if not self._parked:
            return 2**62
        still = []
        for parked in self._parked:
            if now_ms >= parked.deadline_ms:
                response = self._try_complete_fetch(parked.request.body, now_ms)
                self._note_sent(parked.request.body, response)
                self._respond(parked.request, response)
            else:
                still.append(parked)
        self._parked = still
        return min((p.deadline_ms for p in still), default=2**62)

    def _fail_parked_fetches(self) -> None:
        """The leader stepped down: every waiting fetch learns it now, not at its timeout."""
        parked, self._parked = self._parked, []
        for fetch in parked:
            self._respond(fetch.request, self._empty_fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER))

    def _on_fetch_snapshot_request(self, request: FetchSnapshotRequest, now_ms: int) -> FetchSnapshotResponse:
        error = self._check_leader_only(request.cluster_id, request.current_leader_epoch)
        leader, epoch = self._known_leader()
        if error != ErrorCode.NONE:
            return FetchSnapshotResponse(int(error), leader, epoch)
        data = self.storage.read_snapshot(request.snapshot_id)
        if data is None:
            return FetchSnapshotResponse(ErrorCode.SNAPSHOT_NOT_FOUND, leader, epoch)
        if request.position < 0 or request.position >= len(data):
            return FetchSnapshotResponse(ErrorCode.POSITION_OUT_OF_RANGE, leader, epoch)
        if request.replica_id >= 0:
            self.leader.record_voter_contact(request.replica_id, now_ms)
        chunk = data[
            request.position : request.position
            + max(min(request.max_bytes, self.config.fetch_snapshot_max_bytes), 1)
        ]
        return FetchSnapshotResponse(
            ErrorCode.NONE, leader, epoch, request.snapshot_id, len(data), request.position, bytes(chunk)
        )

    def _on_describe_quorum_request(self, now_ms: int) -> DescribeQuorumResponse:
        if self.state.role is not Role.LEADER or self.leader is None:
            leader, epoch = self._known_leader()
            return DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, epoch, -1)
        voters, observers = self.leader.describe(now_ms)
        hw = -1 if self.leader.high_watermark is None else self.leader.high_watermark
        return DescribeQuorumResponse(ErrorCode.NONE, self.node_id, self.state.epoch, hw, voters, observers)

    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        """DescribeQuorum's answer as this node would give it (an error unless it leads)."""
        return self._on_describe_quorum_request(now_ms)

    # ------------------------------------------------------------------ follower side

    def _fetch_request(self) -> FetchRequest:
        end = self.storage.end_offset_and_epoch()
        return FetchRequest(
            self.node_id,
            self.state.epoch,
            end.offset,
            end.epoch,
            self.config.fetch_max_wait_ms,
            self.config.fetch_max_bytes,
            self.cluster_id,
        )

    def _send_fetch(self, destination: int, now_ms: int) -> int:
        partial = self._fetching_snapshot
        if partial is not None and destination == self.state.leader_id:

            def body() -> FetchSnapshotRequest:
                return FetchSnapshotRequest(
                    self.node_id,
                    self.state.epoch,
                    partial.snapshot_id,
                    len(partial.data),
                    self.config.fetch_snapshot_max_bytes,
                    self.cluster_id,
                )

            return self._send(destination, body, now_ms)
        return self._send(destination, self._fetch_request, now_ms)

    def _on_fetch_response(self, source: int, response: FetchResponse, now_ms: int) -> bool:
        handled = self._handle_common_response(
            response.error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            # An observer told "no leader yet" waits retry.backoff.ms before asking the next voter.
            return handled and (self.is_voter or self.state.leader_id is not None)
        if response.error != ErrorCode.NONE:
            return False
        if self.state.role is not Role.FOLLOWER or source != self.state.leader_id:
            return True
        storage = self.storage
        if response.diverging_epoch is not None:
            end = storage.truncate_to_end_offset(response.diverging_epoch)
            if self.high_watermark is not None and end < self.high_watermark:
                raise QuorumViolation(
                    f"node {self.node_id} truncated to {end} on leader {source}'s word, below its high "
                    f"watermark {self.high_watermark}"
                )
            log.info("node %d truncated its log to %d (diverging from leader %d)", self.node_id, end, source)
        elif response.snapshot_id is not None:
            self._start_snapshot_fetch(response.snapshot_id)
        else:
            if response.batches:
                self._append_as_follower(response)
            if response.high_watermark >= 0:
                self._raise_high_watermark(min(response.high_watermark, storage.log_end_offset))
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        self.last_leader_contact = (source, self.state.epoch, now_ms)
        return True

    def _append_as_follower(self, response: FetchResponse) -> None:
        storage = self.storage
        end = storage.log_end_offset
        batches = [b for b in response.batches if b.base_offset >= end]
        if len(batches) != len(response.batches) or (batches and batches[0].base_offset != end):
            raise QuorumViolation(
                f"node {self.node_id} at log end {end} got batches from offset {response.batches[0].base_offset}"
            )
        for batch in batches:
            if batch.epoch > self.state.epoch:
                raise QuorumViolation(
                    f"batch of epoch {batch.epoch} from the leader of epoch {self.state.epoch}"
                )
        storage.append(batches)
        if self.is_voter:
            storage.flush()  # our next Fetch acknowledges these: they must be on disk first

    def _start_snapshot_fetch(self, snapshot_id: OffsetAndEpoch) -> None:
        if self.storage.read_snapshot(snapshot_id) is not None:
            self._install_snapshot(snapshot_id)  # fetched already (a crash before the log moved)
            return
        log.info(
            "node %d fetches snapshot %s from leader %s", self.node_id, snapshot_id, self.state.leader_id
        )
        self._fetching_snapshot = PartialSnapshot(snapshot_id, bytearray())

    def _on_fetch_snapshot_response(self, source: int, response: FetchSnapshotResponse, now_ms: int) -> bool:
        handled = self._handle_common_response(
            response.error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        partial = self._fetching_snapshot
        if self.state.role is not Role.FOLLOWER or source != self.state.leader_id or partial is None:
            return True
        if response.error == ErrorCode.SNAPSHOT_NOT_FOUND or response.snapshot_id is None:
            log.info(
                "node %d: leader no longer has snapshot %s; fetching again", self.node_id, partial.snapshot_id
            )
            self._fetching_snapshot = None
            self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
            return True
        if response.error != ErrorCode.NONE:
            return False
        if response.snapshot_id != partial.snapshot_id or response.position != len(partial.data):
            raise QuorumViolation(
                f"snapshot chunk {response.snapshot_id}@{response.position} does not continue "
                f"{partial.snapshot_id}@{len(partial.data)}"
            )
        partial.data += response.data
        if len(partial.data) > response.size:
            raise QuorumViolation(f"snapshot {partial.snapshot_id} is longer than its size {response.size}")
        if len(partial.data) == response.size:
            data = bytes(partial.data)
            open_snapshot(partial.snapshot_id, data)  # whole and undamaged, or SnapshotError
            self.storage.write_snapshot(partial.snapshot_id, data)
            self._fetching_snapshot = None
            self._install_snapshot(partial.snapshot_id)
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        return True

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Start the log after a stored snapshot the leader pointed us to (Kafka's
        ``truncateToLatestSnapshot``): the snapshot must be ahead of everything in our log."""
        storage = self.storage
        if not snapshot_id > storage.end_offset_and_epoch():
            raise QuorumViolation(
                f"node {self.node_id} was sent snapshot {snapshot_id} but its log already ends at "
                f"{storage.end_offset_and_epoch()}"
            )
        storage.reset_to_snapshot(snapshot_id)
        self._raise_high_watermark(snapshot_id.offset)
        log.info("node %d loaded snapshot %s; its log starts there", self.node_id, snapshot_id)
