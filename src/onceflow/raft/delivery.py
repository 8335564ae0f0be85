"""The listener's view of a :class:`RaftNode` (mixed into it): which committed batches, snapshots
and leader changes to report, in order (``listener`` says what each event promises), and the
snapshots a listener makes of its own state (KIP-630).

What the listener has seen is tracked by the next offset it expects. A node that knows a high
watermark hands over every batch below it, from the log start, after loading the latest snapshot
if the log starts after one (or if the listener fell below the log start: a follower that had to
fetch a snapshot). Only whole batches below the high watermark are handed over.
"""

from __future__ import annotations

import logging

from onceflow.raft.errors import QuorumViolation, SnapshotError
from onceflow.raft.listener import Commit, LeaderChange, LoadSnapshot
from onceflow.raft.quorum_state import Role
from onceflow.raft.snapshot_format import SnapshotWriter, open_snapshot

log = logging.getLogger(__name__)


class ListenerView:
    def create_snapshot(self, offset: int, now_ms: int) -> SnapshotWriter | None:
        """A writer for a snapshot holding the listener's state after every entry below ``offset``
        (a committed offset the listener has reached); None when one at or after it exists. Freezing
        it stores the snapshot and moves the log start up to it (KIP-630)."""
        if self.high_watermark is None or offset > self.high_watermark:
            raise SnapshotError(f"offset {offset} is not committed (high watermark {self.high_watermark})")
        if offset < self.storage.log_start_offset or offset > self.storage.log_end_offset:
            raise SnapshotError(
                f"offset {offset} is outside the log [{self.storage.log_start_offset}, {self.storage.log_end_offset}]"
            )
        latest = self.storage.latest_snapshot_id()
        if latest is not None and offset <= latest.offset:
            return None
        snapshot_id = self.storage.end_offset_and_epoch()._replace(
            offset=offset, epoch=self.storage.epoch_before(offset)
        )
        return SnapshotWriter(snapshot_id, now_ms, self._store_snapshot)

    def _store_snapshot(self, snapshot_id, data: bytes) -> None:
        open_snapshot(snapshot_id, data)  # refuse to store what could not be read back
        self.storage.write_snapshot(snapshot_id, data)
        if snapshot_id.offset <= self.storage.log_end_offset:
            self.storage.delete_before(snapshot_id)
        log.info(
            "node %d stored snapshot %s; log now starts at %d",
            self.node_id,
            snapshot_id,
            self.storage.log_start_offset,
        )

    def _update_listener(self) -> None:
        self._listener_behind = False
        self._maybe_fire_leader_change()
        hw = self.high_watermark
        if hw is None:
            return
        storage = self.storage
        nxt = self._listener_next
        start = storage.log_start_offset
        if (nxt is None or nxt < start) and (-1 if nxt is None else nxt) < hw:
            latest = storage.latest_snapshot_id()
            if latest is not None:
                data = storage.read_snapshot(latest)
                if data is None:
                    raise QuorumViolation(f"snapshot {latest} listed but unreadable")
                self._events.append(LoadSnapshot(open_snapshot(latest, data)))
                nxt = latest.offset
            elif nxt is None and start == 0:
                nxt = 0
            else:
                raise QuorumViolation(
                    f"the listener needs offset {nxt}, below the log start {start}, and no snapshot exists"
                )
            self._listener_next = nxt
        if nxt is None or nxt >= hw:
            self._maybe_fire_leader_change()
            return
        batches = storage.read(nxt, self.config.fetch_max_bytes, end_offset=hw)
        for batch in batches:
            if batch.base_offset != nxt:
                raise QuorumViolation(
                    f"the listener expects offset {nxt}, the log has a batch at {batch.base_offset}"
                )
            self._events.append(Commit(batch))
            nxt = batch.next_offset
        self._listener_next = nxt
        if batches and nxt < hw and storage.read(nxt, 1, end_offset=hw):
            self._listener_behind = True  # more to deliver: poll again at once
        self._maybe_fire_leader_change()

    def _maybe_fire_leader_change(self) -> None:
        current = self.leader_and_epoch
        if current == self._last_leader_event:
            return
        if self.state.role is Role.LEADER:
            if self.leader is None:
                return  # still becoming leader
            caught_up = -1 if self._listener_next is None else self._listener_next
            if caught_up < self.leader.epoch_start_offset:
                return  # the listener must replay everything committed before leading
        self._last_leader_event = current
        self._events.append(LeaderChange(*current))
