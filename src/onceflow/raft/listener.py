"""What the quorum tells the process that uses it (the controller, a broker's metadata loader):
events in the order they happened, delivered by whoever drives the node (``deliver``).

- :class:`Commit`: a committed batch (``batch.base_offset``, ``.last_offset``, ``.epoch``,
  ``.append_timestamp_ms``, ``.records``), in offset order, each exactly once per process life,
  from the log start or from a snapshot. Control batches (a leader's LeaderChange record) come too,
  with no records, so the offsets a listener has seen stay contiguous.
- :class:`LoadSnapshot`: start over from this snapshot (everything below ``snapshot.offset``); the
  commits that follow continue from there. Comes first when the log starts after a snapshot, and
  again whenever the node had to fetch a snapshot because it fell behind the leader's log start.
- :class:`LeaderChange`: the leader (None: unknown) and epoch changed. When this node becomes
  leader, it comes only once the listener has seen every commit below the new epoch's first offset,
  so a listener that appends on seeing itself elected has replayed all committed state first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from onceflow.raft.records import Batch
from onceflow.raft.snapshot_format import Snapshot


@dataclass(frozen=True, slots=True)
class Commit:
    batch: Batch


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class LeaderChange:
    leader_id: int | None
    epoch: int


Event = Commit | LoadSnapshot | LeaderChange


class Listener(Protocol):
    def handle_commit(self, batch: Batch) -> None: ...

    def handle_load_snapshot(self, snapshot: Snapshot) -> None: ...

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None: ...


def deliver(events: list[Event], listener: Listener) -> None:
    """Call ``listener`` for each event, in order."""
    for event in events:
        if isinstance(event, Commit):
            listener.handle_commit(event.batch)
        elif isinstance(event, LoadSnapshot):
            listener.handle_load_snapshot(event.snapshot)
        else:
            listener.handle_leader_change(event.leader_id, event.epoch)
