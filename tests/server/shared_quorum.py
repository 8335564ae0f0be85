"""An in-process metadata quorum that several nodes of one event loop share: a test double of the
Raft quorum at the server's seam (``server.quorum.MetadataQuorum``).

One log, one fixed leader (whose controller is the active one), every node a listener of every
commit. Commits happen at the next turn of the loop, in offset order, once per node. What it leaves
out is Raft itself (elections, replication, failures): everything above the seam (brokers
registering, forwarding to the controller over the controller listener, leaders across brokers,
markers, producer-id blocks) runs as in a real cluster.
"""

from __future__ import annotations

import asyncio

from onceflow.server.quorum import CommittedBatch, NotLeader, QuorumDescription, ReplicaState, now_ms


class SharedLog:
    def __init__(self, leader_id: int, leader_address: tuple[str, int]) -> None:
        self.leader_id = leader_id
        self.leader_address = leader_address
        self.epoch = 1
        self.batches: list[CommittedBatch] = [CommittedBatch(0, 1, now_ms(), (), True)]
        self.views: list[SharedQuorumView] = []
        self._scheduled = False

    @property
    def end_offset(self) -> int:
        last = self.batches[-1]
        return last.last_offset + 1

    def view(self, node_id: int) -> SharedQuorumView:
        view = SharedQuorumView(self, node_id)
        self.views.append(view)
        return view

    def append(self, records, epoch: int) -> int:
        batch = CommittedBatch(self.end_offset, epoch, now_ms(), tuple(records))
        self.batches.append(batch)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver)
        return batch.last_offset

    def _deliver(self) -> None:
        self._scheduled = False
        for view in self.views:
            view.catch_up()


class SharedQuorumView:
    """One node's side of the shared log."""

    def __init__(self, log: SharedLog, node_id: int) -> None:
        self.log = log
        self.node_id = node_id
        self._listeners: list = []
        self._delivered = 0  # batches delivered to this node's listeners
        self._running = False

    def add_listener(self, listener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        self._running = True
        self.catch_up()
        for listener in self._listeners:
            listener.handle_leader_change(self.log.leader_id, self.log.epoch)

    async def stop(self) -> None:
        self._running = False

    def catch_up(self) -> None:
        while self._running and self._delivered < len(self.log.batches):
            batch = self.log.batches[self._delivered]
            self._delivered += 1
            for listener in self._listeners:
                listener.handle_commit(batch)

    def append(self, records, epoch: int) -> int:
        if self.node_id != self.log.leader_id or not self._running:
            raise NotLeader(f"node {self.node_id} does not lead the shared log")
        return self.log.append(records, epoch)

    @property
    def leader(self):
        return self.log.leader_id, self.log.epoch

    @property
    def high_watermark(self) -> int:
        return self.log.end_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    def leader_address(self):
        return self.log.leader_address

    def describe(self):
        if self.node_id != self.log.leader_id:
            return None
        end = self.log.end_offset
        voters = tuple(ReplicaState(v.node_id, end, now_ms(), now_ms()) for v in self.log.views)
        return QuorumDescription(self.log.leader_id, self.log.epoch, end, voters)

    def last_leader_contact(self):
        # A shared log has no network between its nodes: every node always hears its leader, so
        # there is no last word to date a dead leader's session from.
        return None

    def served_apis(self) -> dict:
        return {}
