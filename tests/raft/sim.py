"""A deterministic simulator of the controller quorum: RaftNodes on in-memory storage, driven by a
seeded scheduler that loses, delays, reorders and duplicates messages, partitions the network,
crashes and restarts processes (``kill -9``, or a power cut that loses what was not fsynced), makes
clocks jump, takes snapshots, resigns leaders and appends records.

After every step it checks the invariants (``InvariantViolation`` names the seed, the time and what
broke):

- election safety: at most one leader per epoch, ever;
- committed data never changes and is never lost: every entry below a node's high watermark equals
  the one first seen committed at that offset, and a majority of voters hold the last committed
  entry durably (so it survives a power cut of any minority);
- the high watermark of a process never goes down;
- what a listener sees is exactly the committed log, in order, once (or a snapshot of a prefix of it);
- liveness: a majority of voters that are up and can talk to each other for ``liveness_bound_ms``
  has a leader that has committed in its epoch.

Everything random comes from one ``random.Random(seed)``: a seed replays the same run.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field

from tests.raft.sim_checks import InvariantChecks

from onceflow.raft.config import RaftConfig
from onceflow.raft.errors import NotLeader
from onceflow.raft.memory_storage import MemoryStorage
from onceflow.raft.messages import Inbound, Outbound
from onceflow.raft.node import NEVER, RaftNode
from onceflow.raft.quorum_state import Role


class InvariantViolation(AssertionError):
    pass


@dataclass
class Scenario:
    """What one seed's run looks like; drawn from the seed by :meth:`draw`."""

    seed: int
    voters: int = 3
    observers: int = 0
    config: RaftConfig = field(default_factory=RaftConfig)
    chaos_ms: int = 10_000
    calm_ms: int = 10_000
    loss: float = 0.0
    duplicate: float = 0.0
    max_delay_ms: int = 5
    long_delay: float = 0.0  # share of messages held up to a few timeouts (reordering)
    calm_loss: float = 0.0
    faults_per_s: float = 0.5
    appends_per_s: float = 5.0
    power_cut_share: float = 0.5
    # Chance that a process is killed right after it votes, stands or is elected (the moments
    # where what is on disk decides safety).
    crash_on_transition: float = 0.0
    # Chance that a leader is killed just after a client append reaches it (entries written on
    # the leader alone: the start of Raft's "figure 8" histories).
    crash_after_append: float = 0.0
    snapshot_chunk_bytes: int = 64

    @classmethod
    def draw(cls, seed: int) -> Scenario:
        rng = random.Random(seed ^ 0x5EED)
        voters = rng.choice((1, 3, 3, 3, 3, 5, 5))
        if rng.random() < 0.25:
            config = RaftConfig()  # Kafka's defaults
        else:
            election = rng.choice((50, 100, 200, 300))
            config = RaftConfig(
                election_timeout_ms=election,
                fetch_timeout_ms=election * rng.choice((2, 3)),
                election_backoff_max_ms=election * rng.choice((1, 2)),
                request_timeout_ms=election * 2,
                retry_backoff_ms=rng.choice((5, 20)),
                append_linger_ms=rng.choice((0, 5, 25)),
                fetch_max_wait_ms=max(election // 2, 10),
                fetch_snapshot_max_bytes=rng.choice((40, 200, 4096)),
            )
        unit = config.fetch_timeout_ms
        scenario = cls(
            seed=seed,
            voters=voters,
            observers=rng.choice((0, 0, 1)),
            config=config,
            chaos_ms=unit * rng.randint(3, 8),
            calm_ms=liveness_bound_ms(config) + unit,
            loss=rng.choice((0.0, 0.0, 0.01, 0.05, 0.2)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            max_delay_ms=rng.choice((1, 5, max(config.election_timeout_ms // 4, 1))),
            long_delay=rng.choice((0.0, 0.01, 0.05)),
            calm_loss=rng.choice((0.0, 0.0, 0.01)),
            faults_per_s=rng.choice((0.5, 2.0, 5.0)) * 1000 / config.fetch_timeout_ms / 2,
            appends_per_s=rng.choice((2.0, 10.0, 40.0)) * 1000 / config.fetch_timeout_ms / 2,
            power_cut_share=rng.choice((0.0, 0.5, 1.0)),
            crash_on_transition=rng.choice((0.0, 0.05, 0.2)),
        )
        if rng.random() < 0.25:
            # A storm: five voters, leaders killed as soon as they are elected or written to, and
            # back at once, so that short-lived leaders leave entries on few disks.
            scenario.voters = 5
            scenario.crash_on_transition = 0.3
            scenario.crash_after_append = 0.2
            scenario.faults_per_s *= 2
            scenario.max_delay_ms = 2
        return scenario


def liveness_bound_ms(config: RaftConfig) -> int:
    """How long a connected majority may go without a leader that has committed: a fetch timeout
    to notice the old leader is gone, then a few rounds of election timeout plus backoff (split
    votes), plus request timeouts for messages lost on the way."""
    rounds = 4
    election_round = (
        2 * config.election_timeout_ms + config.election_backoff_max_ms + config.request_timeout_ms
    )
    return int(config.fetch_timeout_ms * 1.5) + rounds * election_round + 2 * config.request_timeout_ms


class StateMachine:
    """The listener of one process: the values of committed records in order."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.next_offset: int | None = None
        self.leader: tuple[int | None, int] | None = None


@dataclass
class Process:
    node_id: int
    is_voter: bool
    storage: MemoryStorage
    node: RaftNode | None = None
    incarnation: int = 0
    clock_offset: int = 0
    timer_version: int = 0
    machine: StateMachine = field(default_factory=StateMachine)
    last_hw: int | None = None
    checked_to: int = 0  # entries of its log below this were compared with the committed log
    last_poll_at: int = -1
    last_role: Role | None = None
    polls_at_once: int = 0


class Simulation(InvariantChecks):
    def __init__(
        self,
        scenario: Scenario,
        *,
        broken_flush: bool = False,
        storage_factory: type[MemoryStorage] = MemoryStorage,
    ) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        self.config = scenario.config
        self.voter_ids = list(range(1, scenario.voters + 1))
        observer_ids = list(range(100, 100 + scenario.observers))
        self.processes: dict[int, Process] = {}
        for node_id in self.voter_ids + observer_ids:
            storage = storage_factory()
            storage.ignore_flush = broken_flush
            self.processes[node_id] = Process(node_id, node_id in self.voter_ids, storage)
        self.now = 0
        self._queue: list[tuple[int, int, tuple]] = []
        self._seq = 0
        self.blocked: set[tuple[int, int]] = set()
        # What is known to be committed: (epoch, payload) per offset, payload the records or "control".
        self.committed: list[tuple[int, object]] = []
        self.committed_values: list[bytes] = []
        self.leaders: dict[int, int] = {}  # epoch -> leader, over the whole run
        self.steps = 0
        self.appended = 0
        self.max_epoch = 0
        self.snapshots_taken = 0
        self.snapshots_loaded = 0
        self.crashes = 0
        self.message_counts: Counter[str] = Counter()
        self._value_counter = 0
        self._stable_since = 0
        self._led_since = 0
        self._holds: dict[int, bool] = {}
        self._durable_checked_end = 0
        self._group: list[int] | None = None
        self._group_ids: set[int] = set()
        self._bound = liveness_bound_ms(self.config)
        self._calm_from = scenario.chaos_ms
        self.end = scenario.chaos_ms + scenario.calm_ms

    # ------------------------------------------------------------------ running

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.scenario.seed} at t={self.now} ms, step {self.steps}: {what}")

    def run(self) -> Simulation:
        for process in self.processes.values():
            self._start(process)
        self._schedule_next_fault()
        self._schedule_next_append()
        while self._queue:
            when, _, action = heapq.heappop(self._queue)
            if when > self.end:
                break
            self.now = max(self.now, when)
            self.steps += 1
            try:
                acted = self._do(action)
            except InvariantViolation:
                raise
            except Exception as exc:
                raise InvariantViolation(
                    f"seed {self.scenario.seed} at t={self.now} ms, step {self.steps}: {exc!r}"
                ) from exc
            self._check(acted)
            if self.now >= self._calm_from + self.config.fetch_timeout_ms and self._converged():
                break
        self._check_end()
        return self

    def _push(self, when: int, action: tuple) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, action))

    def _local_now(self, process: Process) -> int:
        return max(self.now + process.clock_offset, 0)

    def _do(self, action: tuple) -> Process | None:
        """Run one step; returns the one process it touched, or None when it may have touched any."""
        kind = action[0]
        if kind == "timer":
            _, node_id, version = action
            process = self.processes[node_id]
            if process.node is not None and version == process.timer_version:
                if self.now == process.last_poll_at:
                    process.polls_at_once += 1
                    if process.polls_at_once > 1000:
                        self.fail(
                            f"node {process.node_id} asks to be polled again and again at the same time"
                        )
                else:
                    process.last_poll_at, process.polls_at_once = self.now, 0
                self._apply(process, process.node.poll(self._local_now(process)))
            return process
        elif kind == "deliver":
            return self._deliver(*action[1:])
        elif kind == "fault":
            self._fault()
            self._schedule_next_fault()
        elif kind == "append":
            self._schedule_next_append()
            return self._client_append()
        elif kind == "refused":
            _, sender_id, message, reply_to = action
            sender = self.processes[sender_id]
            if sender.node is None or sender.incarnation != reply_to[1]:
                return sender
            self._apply(
                sender,
                sender.node.request_failed(
                    message.destination, message.correlation_id, self._local_now(sender)
                ),
            )
            return sender
        elif kind == "crash":
            process = self.processes[action[1]]
            if process.node is not None and process.incarnation == action[2]:
                self._crash(process, power_cut=self.rng.random() < self.scenario.power_cut_share)
                self._push(
                    self.now + self.rng.randint(0, 2 * self.config.election_timeout_ms),
                    ("restart", process.node_id),
                )
            return None
        elif kind == "restart":
            process = self.processes[action[1]]
            if process.node is None:
                self._start(process)
        elif kind == "heal":
            self.blocked.clear()
            self._stable_since = self.now
        return None

    def _start(self, process: Process) -> None:
        process.incarnation += 1
        process.machine = StateMachine()
        process.last_hw = None
        process.checked_to = 0
        node_rng = random.Random(self.rng.getrandbits(64))
        process.node = RaftNode(
            process.node_id,
            self.voter_ids,
            process.storage,
            self.config,
            node_rng,
            now_ms=self._local_now(process),
        )
        process.checked_to = process.storage.log_start_offset
        self._apply(process, process.node.poll(self._local_now(process)))

    def _apply(self, process: Process, outputs) -> None:
        role = process.node.state.role
        if role is not process.last_role:
            process.last_role = role
            if (
                role in (Role.VOTED, Role.CANDIDATE, Role.LEADER)
                and self.now < self._calm_from
                and self.rng.random() < self.scenario.crash_on_transition
            ):
                self._push(self.now + self.rng.randint(0, 3), ("crash", process.node_id, process.incarnation))
        for message in outputs.messages:
            self._send(process, message)
        for event in outputs.events:
            self._on_event(process, event)
        process.timer_version += 1
        if outputs.next_poll_ms < NEVER:
            when = max(outputs.next_poll_ms - process.clock_offset, self.now)
            self._push(when, ("timer", process.node_id, process.timer_version))

    # ------------------------------------------------------------------ network

    def _send(self, sender: Process, message: Outbound) -> None:
        self.message_counts[type(message.body).__name__] += 1
        scenario = self.scenario
        calm = self.now >= self._calm_from
        loss = scenario.calm_loss if calm else scenario.loss
        copies = 1
        if not calm and self.rng.random() < scenario.duplicate:
            copies = 2
        for _ in range(copies):
            if self.rng.random() < loss:
                continue
            delay = self.rng.randint(1, scenario.max_delay_ms)
            if not calm and self.rng.random() < scenario.long_delay:
                delay += self.rng.randint(0, 3 * self.config.fetch_timeout_ms)
            # A response goes back to the process that asked: (requester, its incarnation).
            reply_to = message.reply_to if message.is_response else (sender.node_id, sender.incarnation)
            self._push(self.now + delay, ("deliver", sender.node_id, message, reply_to))

    def _deliver(self, source: int, message: Outbound, reply_to: tuple[int, int]) -> Process | None:
        destination = self.processes[message.destination]
        if destination.node is None and not message.is_response and self.rng.random() < 0.5:
            # Connection refused: the sender's driver learns its request failed.
            self._push(
                self.now + self.rng.randint(1, self.scenario.max_delay_ms),
                ("refused", source, message, reply_to),
            )
            return destination
        if destination.node is None or (source, destination.node_id) in self.blocked:
            return destination
        if message.is_response and reply_to[1] != destination.incarnation:
            return destination  # the connection it would come back on died with the process that asked
        inbound = Inbound(source, message.correlation_id, message.body, reply_to)
        self._apply(destination, destination.node.handle(inbound, self._local_now(destination)))
        return destination

    # ------------------------------------------------------------------ faults and load

    def _schedule_next_fault(self) -> None:
        rate = self.scenario.faults_per_s
        if rate <= 0:
            return
        when = self.now + int(self.rng.expovariate(rate) * 1000) + 1
        if when < self._calm_from:
            self._push(when, ("fault",))
        else:
            self._push(self._calm_from, ("heal",))
            for process in self.processes.values():
                if process.node is None:
                    self._push(self._calm_from, ("restart", process.node_id))

    def _fault(self) -> None:
        rng = self.rng
        kind = rng.choices(
            ("crash", "partition", "isolate", "heal", "clock", "snapshot", "resign"),
            weights=(3, 2, 2, 2, 1, 3, 1),
        )[0]
        processes = list(self.processes.values())
        self._stable_since = self.now
        if kind == "crash":
            process = rng.choice(processes)
            if process.node is not None:
                self._crash(process, power_cut=rng.random() < self.scenario.power_cut_share)
                self._push(
                    self.now + rng.randint(0, 2 * self.config.fetch_timeout_ms), ("restart", process.node_id)
                )
        elif kind == "partition":
            ids = [p.node_id for p in processes]
            rng.shuffle(ids)
            cut = rng.randint(1, max(len(ids) - 1, 1))
            side = set(ids[:cut])
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            if rng.random() < 0.3:  # sometimes one way only
                self.blocked = {(a, b) for a, b in self.blocked if a in side}
        elif kind == "isolate":
            leader = next((p for p in processes if p.node and p.node.state.role is Role.LEADER), None)
            target = leader or rng.choice(processes)
            ids = [p.node_id for p in processes]
            self.blocked |= {(a, b) for a in ids for b in ids if a != b and target.node_id in (a, b)}
        elif kind == "heal":
            self.blocked.clear()
        elif kind == "clock":
            process = rng.choice(processes)
            process.clock_offset += rng.choice((-1, 1, 1)) * rng.randint(1, 3 * self.config.fetch_timeout_ms)
            if process.node is not None:
                self._apply(process, process.node.poll(self._local_now(process)))
        elif kind == "snapshot":
            self._snapshot(rng.choice(processes))
        elif kind == "resign":
            for process in processes:
                if process.node is not None and process.node.state.role is Role.LEADER:
                    self._apply(process, process.node.resign(self._local_now(process)))

    def _crash(self, process: Process, *, power_cut: bool) -> None:
        self.crashes += 1
        process.node = None
        process.timer_version += 1
        process.storage = process.storage.crash(self.rng, power_cut=power_cut)

    def _snapshot(self, process: Process) -> None:
        node, machine = process.node, process.machine
        if node is None or machine.next_offset is None or node.high_watermark is None:
            return
        offset = machine.next_offset
        if offset > node.high_watermark or offset < node.storage.log_start_offset:
            return
        writer = node.create_snapshot(offset, self._local_now(process))
        if writer is None:
            return
        writer.append(machine.values)
        writer.freeze()
        self.snapshots_taken += 1
        process.checked_to = max(process.checked_to, node.storage.log_start_offset)

    def _schedule_next_append(self) -> None:
        rate = self.scenario.appends_per_s
        # Appends stop a fetch timeout into the calm, so that the run can end once all have caught up.
        if rate > 0 and self.now < self._calm_from + self.config.fetch_timeout_ms:
            self._push(self.now + int(self.rng.expovariate(rate) * 1000) + 1, ("append",))

    def _client_append(self) -> Process | None:
        candidates = [
            p
            for p in self.processes.values()
            if p.node is not None and p.machine.leader == (p.node_id, p.node.state.epoch)
        ]
        if not candidates:
            others = [p for p in self.processes.values() if p.node is not None]
            if others:
                process = self.rng.choice(others)
                if process.node.state.role is not Role.LEADER:
                    try:
                        process.node.append([b"refused"], self._local_now(process))
                    except NotLeader:
                        return None
                    self.fail(f"node {process.node_id} ({process.node.state}) accepted an append")
            return None
        process = self.rng.choice(candidates)
        records = []
        for _ in range(self.rng.randint(1, 3)):
            self._value_counter += 1
            records.append(f"v{self._value_counter}".encode())
        process.node.append(records, self._local_now(process))
        self.appended += len(records)
        self._apply(process, process.node.poll(self._local_now(process)))
        if self.now < self._calm_from and self.rng.random() < self.scenario.crash_after_append:
            self._push(self.now + self.rng.randint(0, 2), ("crash", process.node_id, process.incarnation))
        return process
