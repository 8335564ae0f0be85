"""A deterministic, seeded simulation of three controller nodes over one fake metadata log, with
brokers that register, heartbeat, die, restart, shut down and change ISRs, and admins that create
and delete topics.

The fake quorum is deliberately simple: one log of batches, a commit point that advances late and
by random amounts, and leadership changes that either drop the uncommitted tail (the old leader's
records never reached a majority) or keep it (the new leader commits it first, as Raft does). Each
node gets committed batches in order, possibly late; a new leader is caught up before it activates.
Responses reach brokers only once the records they depend on are committed, and are lost with
them. After every step :meth:`Simulation.check` asserts the invariants; a failure names the seed.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from kafka.protocol.admin import CreatePartitionsRequest, DeleteTopicsRequest, ElectLeadersRequest
from tests.controller.harness import CLUSTER, create_topics_request

from onceflow.controller.config import ControllerConfig, ControllerResult
from onceflow.controller.quorum_controller import QuorumController, replay_all
from onceflow.metadata.image import MetadataImage
from onceflow.metadata.records import NO_LEADER, to_bytes
from onceflow.protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    UnregisterBrokerRequest,
)

NODES = (1, 2, 3)
BROKER_IDS = (1, 2, 3, 4, 5)


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    records: list
    epoch: int


@dataclass
class BrokerProcess:
    """One run of a broker process (a restart is a new incarnation)."""

    broker_id: int
    incarnation: uuid.UUID
    alive: bool = True
    epoch: int = -1  # from its registration response; -1 until registered
    fenced: bool = True
    shutting_down: bool = False
    lag: int = 0  # how many committed offsets behind its metadata is


@dataclass
class Simulation:
    seed: int
    unclean: bool = False
    rng: random.Random = field(init=False)
    log: list[Batch] = field(default_factory=list)
    committed: int = 0  # batches[:committed] are committed
    delivered: dict[int, int] = field(default_factory=dict)
    nodes: dict[int, QuorumController] = field(default_factory=dict)
    epoch: int = 0
    leader: int | None = None
    now: int = 0
    processes: dict[int, BrokerProcess] = field(default_factory=dict)
    # (wait offset, quorum epoch of the write, what to do with the response)
    waiting: list = field(default_factory=list)
    # the committed log's image, replayed batch by batch: the reference
    reference: MetadataImage = field(default_factory=lambda: MetadataImage.EMPTY)
    epochs_seen: dict = field(default_factory=dict)
    steps: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        for node in NODES:
            config = ControllerConfig(
                node_id=node,
                cluster_id=CLUSTER,
                broker_session_timeout_ms=9000,
                leader_imbalance_check_interval_seconds=30,
                metadata_max_idle_interval_ms=5000,
                unclean_leader_election_enable=self.unclean,
            )
            self.nodes[node] = QuorumController(config, random.Random(self.seed * 10 + node))
            self.delivered[node] = 0
        self.elect_new_leader(keep_uncommitted=True)

    # ------------------------------------------------------------ the fake quorum

    @property
    def end_offset(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0

    @property
    def committed_offset(self) -> int:
        return self.log[self.committed - 1].last_offset if self.committed else -1

    @property
    def active(self) -> QuorumController | None:
        node = self.nodes.get(self.leader) if self.leader is not None else None
        return node if node is not None and node.active else None

    def submit(self, result: ControllerResult, on_response=None) -> None:
        """Append an operation's records; its response waits for them to commit."""
        ctl = self.active
        if result.records:
            base = self.end_offset
            batch = Batch(
                base, base + len(result.records) - 1, [to_bytes(r) for r in result.records], ctl.epoch
            )
            assert batch.last_offset == result.wait_offset, f"seed {self.seed}: offsets mispredicted"
            self.log.append(batch)
        if on_response is not None:
            if result.wait_offset <= self.committed_offset:
                on_response(result.response)
            else:
                self.waiting.append((result.wait_offset, ctl.epoch, on_response, result.response))

    def commit(self, count: int) -> None:
        target = min(len(self.log), self.committed + count)
        for batch in self.log[self.committed : target]:
            self.reference = self.reference.apply_all(_decoded(batch.records))
            self.check_epochs_grow(self.reference)
        self.committed = target
        ready = [w for w in self.waiting if w[0] <= self.committed_offset]
        self.waiting = [w for w in self.waiting if w[0] > self.committed_offset]
        for _, _, callback, response in ready:
            callback(response)

    def deliver(self, node: int, all_of_them: bool = False) -> None:
        upto = self.committed if all_of_them else self.rng.randint(self.delivered[node], self.committed)
        for batch in self.log[self.delivered[node] : upto]:
            self.nodes[node].handle_commit(batch)
        self.delivered[node] = max(self.delivered[node], upto)

    def elect_new_leader(self, keep_uncommitted: bool) -> None:
        if not keep_uncommitted and self.committed < len(self.log):
            dropped_from = self.log[self.committed].base_offset
            del self.log[self.committed :]
            self.waiting = [w for w in self.waiting if w[0] < dropped_from]
        self.epoch += 1
        previous = self.leader
        self.leader = self.rng.choice(NODES)
        for node in NODES:
            self.nodes[node].handle_leader_change(self.leader, self.epoch)
        # the new leader commits what it kept, then writes from the log end
        self.commit(len(self.log))
        self.deliver(self.leader, all_of_them=True)
        ctl = self.nodes[self.leader]
        # It last heard from the previous leader (also broker ``previous``) a while ago: that broker's
        # session dates from then, whether its process is dead or alive.
        heard = (previous, self.now - self.rng.choice([0, 500, 4000, 20000])) if previous else None
        self.submit(ctl.activate(self.epoch, self.end_offset, self.now, previous_leader=heard))

    # ------------------------------------------------------------ actors

    def step(self) -> None:
        self.steps += 1
        self.now += self.rng.choice([0, 0, 10, 100, 500, 1500, 4000])
        action = self.rng.choices(
            ["commit", "broker", "broker", "broker", "admin", "isr", "leader", "poll"],
            weights=[4, 3, 3, 3, 2, 3, 0.3, 2],
        )[0]
        getattr(self, f"_{action}")()
        for node in NODES:
            if self.rng.random() < 0.7:
                self.deliver(node)
        self.check()

    def _commit(self) -> None:
        self.commit(self.rng.randint(1, 3))

    def _leader(self) -> None:
        self.elect_new_leader(keep_uncommitted=self.rng.random() < 0.5)

    def _poll(self) -> None:
        ctl = self.active
        deadline = ctl.next_deadline_ms()
        if deadline is not None and deadline <= self.now:
            for result in ctl.poll(self.now):
                self.submit(result)

    def _view(self) -> MetadataImage:
        """What brokers know: the committed image (their replay may lag, their requests may be stale)."""
        return self.reference

    def _broker(self) -> None:
        ctl = self.active
        broker_id = self.rng.choice(BROKER_IDS)
        process = self.processes.get(broker_id)
        if process is None or not process.alive:
            if process is not None and self.rng.random() < 0.15:
                self.submit(
                    ctl.unregister_broker(UnregisterBrokerRequest(broker_id=broker_id), self.now),
                    lambda r: None,
                )
                return
            self._start(broker_id)
            return
        choice = self.rng.random()
        if choice < 0.06:
            process.alive = False  # killed: it simply stops heartbeating
        elif choice < 0.10:
            process.shutting_down = True
            self._heartbeat(process)
        elif choice < 0.13:
            self._start(broker_id)  # a second process with the same id while the first lives
        else:
            self._heartbeat(process)

    def _start(self, broker_id: int) -> None:
        process = BrokerProcess(
            broker_id, uuid.UUID(int=self.rng.getrandbits(128)), lag=self.rng.choice([0, 0, 1, 3])
        )
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=CLUSTER,
            incarnation_id=process.incarnation,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0
                )
            ],
            features=[
                BrokerRegistrationRequest.Feature(
                    name="metadata.version", min_supported_version=1, max_supported_version=14
                )
            ],
            rack=self.rng.choice([None, "a", "b"]),
        )
        old = self.processes.get(broker_id)
        before = self.active.image.broker(broker_id)
        session_alive = self.active.sessions.has_valid_session(broker_id, self.now)

        def registered(response) -> None:
            if response.error_code == 0:
                process.epoch = response.broker_epoch
                if old is not None and old is not process:
                    old.alive = False  # the old process's registration is gone
                self.processes[broker_id] = process
            else:
                # a duplicate id is only refused while another incarnation's session lives
                assert response.error_code in (101,), (
                    f"seed {self.seed}: registration error {response.error_code}"
                )

        result = self.active.register_broker(request, self.now)
        if result.response.error_code == 101:
            assert before is not None and before.incarnation_id != process.incarnation and session_alive
        self.submit(result, registered)

    def _heartbeat(self, process: BrokerProcess) -> None:
        if process.epoch < 0:
            return
        offset = max(-1, self.committed_offset - process.lag)
        request = BrokerHeartbeatRequest(
            broker_id=process.broker_id,
            broker_epoch=process.epoch,
            current_metadata_offset=offset,
            want_fence=False,
            want_shut_down=process.shutting_down,
        )

        def answered(response) -> None:
            if response.error_code == 0:
                process.fenced = response.is_fenced
                if response.should_shut_down:
                    process.alive = False
            elif response.error_code == 77:  # STALE_BROKER_EPOCH: replaced or unregistered
                process.alive = False

        self.submit(self.active.broker_heartbeat(request, self.now), answered)

    def _admin(self) -> None:
        ctl = self.active
        choice = self.rng.random()
        image = ctl.image
        if choice < 0.45:
            name = f"t{self.rng.randrange(8)}"
            factor = self.rng.randint(1, 4)
            active_before = sum(1 for b in image.brokers.values() if b.active)
            result = ctl.create_topics(
                create_topics_request((name, self.rng.randint(1, 4), factor)), self.now
            )
            for topic in result.response.topics:
                if topic.error_code == 0:
                    assert factor <= active_before, (
                        f"seed {self.seed}: RF {factor} over {active_before} live brokers"
                    )
                    for record in result.records:
                        if getattr(record, "replicas", None):
                            assert all(image.is_active(b) for b in record.replicas), (
                                f"seed {self.seed}: replica on a dead broker"
                            )
            self.submit(result, lambda r: None)
        elif choice < 0.65:
            names = sorted(image.topic_ids)
            if names:
                request = DeleteTopicsRequest(topic_names=[self.rng.choice(names)], timeout_ms=1)
                self.submit(ctl.delete_topics(request, self.now, version=5), lambda r: None)
        elif choice < 0.8:
            names = sorted(image.topic_ids)
            if names:
                name = self.rng.choice(names)
                T = CreatePartitionsRequest.CreatePartitionsTopic
                count = len(image.topic(name).partitions) + self.rng.randint(0, 2)
                request = CreatePartitionsRequest(
                    topics=[T(name=name, count=count, assignments=None)], timeout_ms=1, validate_only=False
                )
                self.submit(ctl.create_partitions(request, self.now), lambda r: None)
        else:
            request = ElectLeadersRequest(
                election_type=self.rng.choice([0, 0, 1]), topic_partitions=None, timeout_ms=1
            )
            self.submit(ctl.elect_leaders(request, self.now), lambda r: None)

    def _isr(self) -> None:
        """A partition leader asks for an ISR change, from its (possibly stale) committed view."""
        view = self._view()
        candidates = [
            (topic, index, p)
            for topic in view.topics.values()
            for index, p in topic.partitions.items()
            if p.leader != NO_LEADER
            and self.processes.get(p.leader) is not None
            and self.processes[p.leader].alive
        ]
        if not candidates:
            return
        topic, index, partition = self.rng.choice(candidates)
        isr = list(partition.isr)
        outside = [r for r in partition.replicas if r not in isr]
        if outside and self.rng.random() < 0.6:
            isr.append(self.rng.choice(outside))
        elif len(isr) > 1:
            isr.remove(self.rng.choice([r for r in isr if r != partition.leader]))
        R = AlterPartitionRequest
        leader = self.processes[partition.leader]
        data = R.TopicData.PartitionData(
            partition_index=index,
            leader_epoch=partition.leader_epoch,
            partition_epoch=partition.partition_epoch,
            new_isr_with_epochs=[
                R.TopicData.PartitionData.BrokerState(
                    broker_id=b, broker_epoch=view.broker(b).epoch if view.broker(b) else -1
                )
                for b in isr
            ],
            leader_recovery_state=0,
        )
        request = R(
            broker_id=leader.broker_id,
            broker_epoch=leader.epoch,
            topics=[R.TopicData(topic_id=topic.id, partitions=[data])],
        )
        self.submit(self.active.alter_partition(request, self.now, version=3), lambda r: None)

    # ------------------------------------------------------------ invariants

    def check_epochs_grow(self, image: MetadataImage) -> None:
        for topic in image.topics.values():
            for index, p in topic.partitions.items():
                key = (topic.id, index)
                previous = self.epochs_seen.get(key)
                if previous is not None:
                    assert p.leader_epoch >= previous[0] and p.partition_epoch >= previous[1], (
                        f"seed {self.seed}: epochs of {topic.name}-{index} went back: {previous} -> {(p.leader_epoch, p.partition_epoch)}"
                    )
                self.epochs_seen[key] = (p.leader_epoch, p.partition_epoch)

    def check_image(self, image: MetadataImage, what: str) -> None:
        where = f"seed {self.seed}, step {self.steps}, {what}"
        for topic in image.topics.values():
            for index, p in topic.partitions.items():
                name = f"{topic.name}-{index}"
                assert p.isr, f"{where}: {name} has an empty ISR"
                assert len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), (
                    f"{where}: {name} ISR {p.isr} vs {p.replicas}"
                )
                if p.leader != NO_LEADER:
                    assert p.leader in p.isr, f"{where}: {name} leader {p.leader} not in ISR {p.isr}"
                    assert image.is_active(p.leader), f"{where}: {name} led by inactive broker {p.leader}"
                elif not self.unclean:
                    eligible = [r for r in p.isr if image.is_active(r)]
                    assert not eligible, f"{where}: {name} has no leader although {eligible} could lead"
        incarnations = [b.incarnation_id for b in image.brokers.values()]
        assert len(set(incarnations)) == len(incarnations), f"{where}: two brokers share an incarnation"

    def check(self) -> None:
        ctl = self.active
        if ctl is not None:
            self.check_image(ctl.image, "uncommitted image")
            # at most one live process per broker id holds the image's registration
            for broker in ctl.image.brokers.values():
                holders = [
                    p
                    for p in [self.processes.get(broker.id)]
                    if p and p.alive and p.incarnation == broker.incarnation_id
                ]
                assert len(holders) <= 1
        for node in NODES:
            controller = self.nodes[node]
            self.check_image(controller.committed_image, f"node {node} committed image")
            assert controller.committed_offset <= self.committed_offset

    def finish(self) -> None:
        """Commit and deliver everything, then every node's image is the log replayed from scratch."""
        self.commit(len(self.log))
        for node in NODES:
            self.deliver(node, all_of_them=True)
        from_scratch = replay_all(batch.records for batch in self.log)
        assert from_scratch == self.reference, (
            f"seed {self.seed}: incremental replay differs from a full replay"
        )
        for node in NODES:
            assert self.nodes[node].committed_image == from_scratch, (
                f"seed {self.seed}: node {node} differs from the log"
            )
        ctl = self.active
        assert ctl.image == from_scratch, (
            f"seed {self.seed}: the leader's image differs from its committed log"
        )


def _decoded(records):
    from onceflow.metadata.records import from_bytes

    return [from_bytes(r) for r in records]


def run_simulation(seed: int, steps: int, unclean: bool = False) -> Simulation:
    sim = Simulation(seed, unclean=unclean)
    for _ in range(steps):
        sim.step()
    sim.finish()
    return sim
