"""What the server needs of the metadata quorum, and the one-voter quorum of a single node.

The quorum replicates ``__cluster_metadata`` as opaque record bytes (the seam in docs/internals.md):
the server appends on the leader and hears, through listeners, of every committed batch (in offset
order, once each), of snapshots to start from, and of leader changes. :class:`MetadataQuorum` is that
contract; the Raft quorum (``onceflow.raft``) and :class:`LocalQuorum` implement it.

:class:`LocalQuorum` is the quorum of a node that is its own only voter and keeps nothing on disk: it
leads epoch 1 from the start, and a batch is committed as soon as the event loop turns. A single
node's metadata is then rebuilt at every start from its data dir (``migration``), which is exactly
what the single-node onceflow kept there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


class NotLeader(Exception):  # noqa: N818 - the quorum's own name for it
    """Appending on a node that does not lead the quorum (any more)."""


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """A committed batch as listeners get it (the shape of ``onceflow.raft.records.Batch``)."""

    base_offset: int
    epoch: int
    append_timestamp_ms: int
    records: tuple[bytes, ...] = ()
    is_control: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + max(len(self.records), 1) - 1


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica of the metadata log as its leader sees it (DescribeQuorum's ReplicaState)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """What the leader of the metadata quorum knows of it (Kafka's DescribeQuorum answer)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...] = ()


class QuorumListener(Protocol):
    def handle_commit(self, batch) -> None: ...

    def handle_load_snapshot(self, snapshot) -> None: ...

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None: ...


class MetadataQuorum(Protocol):
    node_id: int

    def add_listener(self, listener: QuorumListener) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def append(self, records: Sequence[bytes], epoch: int) -> int:
        """Queue ``records`` as one batch in ``epoch`` (which must be the leader's current one);
        returns the offset of the last. Raises :class:`NotLeader`."""

    @property
    def leader(self) -> tuple[int | None, int]:
        """(leader id or None, epoch) as this node knows them."""

    @property
    def high_watermark(self) -> int:
        """The offset after the last committed entry this node knows of."""

    def leader_address(self) -> tuple[str, int] | None:
        """The controller listener of the current leader (from ``controller.quorum.voters``)."""

    def describe(self) -> QuorumDescription | None:
        """The quorum as this node sees it if it leads (None: ask the leader)."""

    def last_leader_contact(self) -> tuple[int, int] | None:
        """(leader id, wall-clock ms) of the last word this node had from another node leading the
        quorum (None: never). Read when this node's controller activates."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LocalQuorum:
    """The quorum of one voter with no durable log: commits at the next turn of the event loop. What
    a single node runs on in a build without the Raft package (``onceflow.raft``)."""

    durable = False

    def __init__(self, node_id: int, address: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.node_id = node_id
        self.address = address
        self._listeners: list[QuorumListener] = []
        self._epoch = 0
        self._next_offset = 0
        self._committed = 0
        self._pending: list[CommittedBatch] = []
        self._scheduled = False
        self._running = False

    def add_listener(self, listener: QuorumListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        self._running = True
        self._epoch = 1
        # As a Raft leader does, the epoch starts with a control record that commits what came before.
        self._pending.append(CommittedBatch(self._next_offset, self._epoch, now_ms(), (), True))
        self._next_offset += 1
        self._deliver()
        for listener in self._listeners:
            listener.handle_leader_change(self.node_id, self._epoch)

    async def stop(self) -> None:
        self._running = False

    @property
    def leader(self) -> tuple[int | None, int]:
        return (self.node_id if self._running else None), self._epoch

    @property
    def high_watermark(self) -> int:
        return self._committed

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    def leader_address(self) -> tuple[str, int] | None:
        return self.address if self._running else None

    def last_leader_contact(self) -> tuple[int, int] | None:
        return None  # the only voter: no other leader

    def append(self, records: Sequence[bytes], epoch: int) -> int:
        if not self._running or epoch != self._epoch:
            raise NotLeader(f"node {self.node_id} does not lead epoch {epoch}")
        batch = CommittedBatch(self._next_offset, epoch, now_ms(), tuple(records))
        self._next_offset += len(batch.records)
        self._pending.append(batch)
        if not self._scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return batch.last_offset  # a synchronous caller (LocalTopicAdmin) commits at once
            self._scheduled = True
            loop.call_soon(self._deliver)
        return batch.last_offset

    def describe(self) -> QuorumDescription | None:
        if not self._running:
            return None
        now = now_ms()
        me = ReplicaState(self.node_id, self._next_offset, now, now)
        return QuorumDescription(self.node_id, self._epoch, self._committed, (me,))

    def served_apis(self) -> dict:
        """The quorum's own APIs on the controller listener: none (nobody else is a voter)."""
        return {}

    def commit_now(self) -> None:
        """Commit and deliver every batch appended so far, before returning (one voter, no disk)."""
        self._deliver()

    def _deliver(self) -> None:
        self._scheduled = False
        while self._pending and self._running:
            batch = self._pending.pop(0)
            self._committed = batch.last_offset + 1
            for listener in self._listeners:
                listener.handle_commit(batch)
