"""A small, fault-free harness for unit tests of RaftNode: nodes on memory storage, messages
delivered in order after ``latency_ms``, a shared clock advanced explicitly, and the option to cut
nodes off. The simulator (``sim``) is for random schedules; this is for spelling out one."""

from __future__ import annotations

import random
from collections import deque

from onceflow.raft.config import RaftConfig
from onceflow.raft.listener import Commit, Event, LeaderChange, LoadSnapshot
from onceflow.raft.memory_storage import MemoryStorage
from onceflow.raft.messages import Inbound, Outbound
from onceflow.raft.node import NEVER, RaftNode
from onceflow.raft.quorum_state import Role


class Harness:
    def __init__(
        self,
        voters=(1, 2, 3),
        observers=(),
        config: RaftConfig | None = None,
        seed: int = 0,
        storage_for=None,
    ) -> None:
        self.config = config or RaftConfig()
        self.voters = tuple(voters)
        self.now = 0
        make = storage_for or (lambda node_id: MemoryStorage())
        self.storages = {n: make(n) for n in (*voters, *observers)}
        self.nodes: dict[int, RaftNode] = {}
        self.events: dict[int, list[Event]] = {n: [] for n in self.storages}
        self.values: dict[int, list[bytes]] = {n: [] for n in self.storages}
        self.wakeups: dict[int, int] = {}
        self.down: set[int] = set()
        self.cut: set[int] = set()  # nodes whose messages are dropped both ways
        self.inflight: deque[tuple[int, int, Outbound]] = deque()  # (deliver at, source, message)
        self.sent: list[tuple[int, Outbound]] = []
        self._seed = seed
        for node_id in self.storages:
            self.start(node_id)

    def start(self, node_id: int) -> None:
        self.down.discard(node_id)
        node = RaftNode(
            node_id,
            self.voters,
            self.storages[node_id],
            self.config,
            random.Random(self._seed + node_id),
            now_ms=self.now,
        )
        self.nodes[node_id] = node
        self.take(node_id, node.poll(self.now))

    def crash(self, node_id: int, *, power_cut: bool = False) -> None:
        self.down.add(node_id)
        self.storages[node_id] = self.storages[node_id].crash(random.Random(0), power_cut=power_cut)
        self.wakeups.pop(node_id, None)

    def take(self, node_id: int, outputs) -> None:
        for message in outputs.messages:
            self.sent.append((node_id, message))
            self.inflight.append((self.now + 1, node_id, message))
        for event in outputs.events:
            self.events[node_id].append(event)
            if isinstance(event, Commit):
                self.values[node_id].extend(event.batch.records)
            elif isinstance(event, LoadSnapshot):
                self.values[node_id] = list(event.snapshot.records)
        self.wakeups[node_id] = outputs.next_poll_ms

    def step_to(self, until: int) -> None:
        """Deliver messages and run timers in time order up to ``until``."""
        while True:
            next_message = self.inflight[0][0] if self.inflight else NEVER
            next_timer = min((t for n, t in self.wakeups.items() if n not in self.down), default=NEVER)
            when = min(next_message, next_timer)
            if when > until:
                self.now = until
                return
            self.now = max(self.now, when)
            if next_message <= next_timer:
                _, source, message = self.inflight.popleft()
                target = message.destination
                if target in self.down or target in self.cut or source in self.cut:
                    continue
                inbound = Inbound(source, message.correlation_id, message.body, source)
                self.take(target, self.nodes[target].handle(inbound, self.now))
            else:
                node_id = next(n for n, t in self.wakeups.items() if t == when and n not in self.down)
                self.take(node_id, self.nodes[node_id].poll(self.now))

    def run(self, ms: int) -> None:
        self.step_to(self.now + ms)

    def leader(self) -> RaftNode | None:
        leaders = [n for i, n in self.nodes.items() if i not in self.down and n.state.role is Role.LEADER]
        return leaders[0] if leaders else None

    def elect(self, within_ms: int = 10_000) -> RaftNode:
        deadline = self.now + within_ms
        while self.now < deadline:
            self.run(50)
            leader = self.leader()
            if leader is not None and leader.leader.high_watermark is not None:
                return leader
        raise AssertionError(f"no leader within {within_ms} ms: {self.nodes}")

    def append(self, records: list[bytes]) -> int:
        leader = self.leader()
        offset = leader.append(records, self.now)
        self.take(leader.node_id, leader.poll(self.now))
        return offset

    def leader_changes(self, node_id: int) -> list[tuple[int | None, int]]:
        return [(e.leader_id, e.epoch) for e in self.events[node_id] if isinstance(e, LeaderChange)]
