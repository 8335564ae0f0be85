"""A deterministic, seeded simulation of one partition replicated on three brokers.

Everything but the network and the clock is the real code: each broker holds real ``Log``s in its own
data directory, ``ReplicatedPartition``s and ``ReplicaFetcher``s; the controller is the real sans-IO
``QuorumController`` over a log that commits at once; producers are idempotent (one batch in flight,
acks=all, a retry keeps its sequence number). Messages are objects on a seeded network that delays,
reorders and drops them, and links that can be cut. Faults: a broker killed (kill -9: the page cache
survives) or losing power (what was not fsynced is lost: allowed only while the whole ISR is alive,
the case Kafka's guarantees cover), paused (SIGSTOP: it keeps acting on what it knew, a zombie),
cut off from everyone, preferred-leader elections. Unclean leader election is off.

Checked after every step:

- committed data never changes: every batch below any broker's high watermark, once seen, is the same
  bytes at the same offset everywhere afterwards (``Oracle``), and a broker never truncates below its
  own high watermark;
- the high watermark never passes what the ISR holds: on the current leader, every live ISR member of
  the metadata has a log end at or past it;
- a broker that becomes leader holds every committed batch;
- every acks=all acknowledgement is for a batch below the acknowledging leader's high watermark, and
  no producer sees OUT_OF_ORDER_SEQUENCE_NUMBER (that would mean an acknowledged batch was lost);

and at the end, once every fault is healed and the replicas caught up: the three logs are the same
bytes, every acknowledged batch is there once, at the offset its producer was told, and no batch of a
producer is there twice (retries were answered as duplicates, with their original offsets).
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.controller.harness import CLUSTER, FakeLog, create_topics_request, run

from onceflow.broker.replica.config import ReplicaConfig
from onceflow.broker.replica.fetcher import EpochRequestData, FetchRequestData, LeaderOffsetsRequestData
from onceflow.broker.replica.manager import ReplicaManager, ToController
from onceflow.broker.replica.partition import ReplicatedPartition
from onceflow.controller.config import ControllerConfig
from onceflow.controller.quorum_controller import QuorumController
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.log.offset_checkpoint import high_watermark_path
from onceflow.metadata.image import NO_LEADER, MetadataImage
from onceflow.protocol import records
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from onceflow.protocol.record_codec import encode_batch

TOPIC = "t"
KEY = (TOPIC, 0)
TICK_MS = 20
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500
REQUEST_TIMEOUT_MS = 2000
CONTROLLER = "controller"
TOPIC_CONFIGS = {"min.insync.replicas": "2", "segment.bytes": "3000"}


class InvariantViolation(AssertionError):
    pass


# ---------------------------------------------------------------------------------------------- network


class Network:
    """Seeded delivery: each message gets a delay; some are dropped; cut links drop everything."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.queue: list[tuple[int, int, Any, Any]] = []
        self._seq = itertools.count()
        self.isolated: set[Any] = set()  # nodes cut off from every other node but the reachable ones
        self.reachable: set[Any] = set()  # (producers that still reach an isolated broker)
        self.drop_rate = 0.02
        self.slow_rate = 0.05

    def cut(self, source: Any, dest: Any) -> bool:
        for node, other in ((source, dest), (dest, source)):
            if node in self.isolated and other not in self.reachable:
                return True
        return False

    def send(self, now: int, source: Any, dest: Any, message: Any) -> None:
        if self.cut(source, dest) or self.rng.random() < self.drop_rate:
            return
        delay = self.rng.randint(1, 15) if self.rng.random() >= self.slow_rate else self.rng.randint(50, 600)
        heapq.heappush(self.queue, (now + delay, next(self._seq), dest, message))

    def due(self, now: int) -> list[tuple[Any, Any]]:
        out = []
        while self.queue and self.queue[0][0] <= now:
            _, _, dest, message = heapq.heappop(self.queue)
            out.append((dest, message))
        return out


# ---------------------------------------------------------------------------------------------- messages


@dataclass
class Envelope:
    source: Any
    incarnation: int  # of the sender (replies to a dead incarnation are dropped)
    body: Any
    request: Any = None  # the request a reply answers


@dataclass
class ProduceMsg:
    producer_id: int
    attempt: int
    raw: bytes


@dataclass
class ProduceReply:
    attempt: int
    error: ErrorCode
    base_offset: int = -1
    from_true_leader: bool = True  # the metadata's leader in its leader epoch (not a zombie)


# ---------------------------------------------------------------------------------------------- oracle


class Oracle:
    """Every batch ever seen below some broker's high watermark, by base offset."""

    def __init__(self) -> None:
        self.batches: dict[int, bytes] = {}
        self.end = 0  # one past the last committed offset seen

    def check_log(self, broker: int, log: Log, start: int, upper: int) -> None:
        """Add or compare the batches of ``log`` in ``[start, upper)`` (whole batches below ``upper``)."""
        if start >= upper or start >= log.log_end_offset:
            return
        data = log.read(max(start, log.log_start_offset), 10**9, max_offset=upper)
        pos = 0
        view = memoryview(data)
        while pos < len(view):
            size = records.batch_size_at(view, pos)
            header = records.read_header(view, pos)
            batch = bytes(view[pos : pos + size])
            pos += size
            if header.last_offset >= upper:
                break
            known = self.batches.get(header.base_offset)
            if known is None:
                self.batches[header.base_offset] = batch
                self.end = max(self.end, header.last_offset + 1)
            elif known != batch:
                raise InvariantViolation(
                    f"broker {broker}: committed batch at offset {header.base_offset} changed"
                )

    def check_holds_all(self, broker: int, log: Log) -> None:
        """``log`` has every committed batch (a new leader must)."""
        if log.log_end_offset < self.end:
            raise InvariantViolation(
                f"broker {broker} leads with log end {log.log_end_offset}, below the committed end {self.end}"
            )
        self.check_log(broker, log, log.log_start_offset, self.end)
        stored = {
            h.base_offset for h, _ in log.iter_batches(log.log_start_offset) if h.base_offset < self.end
        }
        missing = [o for o in self.batches if o >= log.log_start_offset and o not in stored]
        if missing:
            raise InvariantViolation(f"broker {broker} leads without committed batches at {missing[:5]}")


# ---------------------------------------------------------------------------------------------- disk


def record_durable_sizes(directory: Path) -> dict[str, int]:
    """What an fsync made durable: the size of each data and transaction-index file now."""
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.suffix in (".log", ".txnindex")}


def lose_unflushed(directory: Path, durable: dict[str, int]) -> None:
    """A power loss: files cut back to their last fsynced size; files created since, gone."""
    for p in directory.iterdir():
        if p.suffix not in (".log", ".txnindex"):
            continue
        size = durable.get(p.name)
        if size is None:
            p.unlink()
        elif p.stat().st_size > size:
            os.truncate(p, size)


# ---------------------------------------------------------------------------------------------- broker


class CheckedPartition(ReplicatedPartition):
    """A ReplicatedPartition that reports a truncation below its own high watermark."""

    sim: Simulation  # set by the running Simulation

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            self.sim.stats["truncations"] += 1
        if offset < self.log.high_watermark:
            self.sim.violations.append(
                f"broker {self.broker_id} truncated to {offset}, below its high watermark {self.log.high_watermark}"
            )
        super().truncate_to(offset)


class SimBroker:
    """One broker process: the real ``ReplicaManager`` plus registration, heartbeats and fsyncs."""

    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.data_dir = sim.root / f"broker-{broker_id}"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.incarnation = 0
        self.alive = False
        self.paused_until = 0
        self.inbox: list[Envelope] = []  # what arrived while paused
        self.durable: dict[str, dict[str, int]] = {}  # per partition directory, after the last fsync
        self.start(0)

    # -- lifecycle --

    def start(self, now: int) -> None:
        self.incarnation += 1
        self.alive = True
        self.paused_until = 0
        self.inbox = []
        self.image_offset = -1
        self.registered = False
        self.sim.oracle_checked[self.id] = 0
        self.next_heartbeat = now
        self.next_checkpoint = now + 500
        self.next_flush = now + self.sim.rng.randint(100, 600)
        self.registration_sent = -(10**9)
        self.incarnation_id = uuid.UUID(int=self.sim.rng.getrandbits(128))
        config = ReplicaConfig(
            broker_id=self.id,
            replica_lag_time_max_ms=2000,
            replica_fetch_backoff_ms=200,
            replica_fetch_wait_max_ms=300,
        )
        self.replicas = ReplicaManager(
            config,
            self._open_log,
            checkpoint_path=high_watermark_path(self.data_dir),
            truncate_on_fetch=self.sim.truncate_on_fetch,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            partition_class=CheckedPartition,
            on_leadership=self._on_leadership,
        )

    def _open_log(self, topic: str, index: int, topic_id: Any) -> Log:
        configs = LogConfig.from_topic_configs(dict(self.replicas.image.topic_config(topic)))
        return Log.open(self.data_dir / f"{topic}-{index}", configs)

    def _on_leadership(self, key: tuple[str, int], partition: ReplicatedPartition) -> None:
        if partition.is_leader:
            self.sim.on_become_leader(self, partition)

    @property
    def partitions(self) -> dict[tuple[str, int], ReplicatedPartition]:
        return self.replicas.partitions if self.replicas is not None else {}

    @property
    def broker_epoch(self) -> int | None:
        return self.replicas.broker_epoch if self.registered and self.replicas is not None else None

    def crash(self, *, lose_unflushed_data: bool) -> None:
        for partition in self.partitions.values():
            partition.log.abandon()
        if lose_unflushed_data:
            for directory in self.data_dir.iterdir():
                if directory.is_dir():
                    lose_unflushed(directory, self.durable.get(directory.name, {}))
        self.alive = False
        self.replicas = None

    @property
    def active(self) -> bool:
        return self.alive and self.paused_until <= self.sim.now

    # -- sending --

    def send(self, dest: Any, body: Any, request: Any = None) -> None:
        self.sim.network.send(self.sim.now, self.id, dest, Envelope(self.id, self.incarnation, body, request))

    # -- the tick --

    def tick(self, now: int) -> None:
        if self.inbox:
            inbox, self.inbox = self.inbox, []
            for envelope in inbox:
                self.receive(envelope)
        if not self.registered:
            # Like Kafka's broker, nothing is replicated before the registration is accepted.
            if now - self.registration_sent >= 1000:
                self.registration_sent = now
                self.send(CONTROLLER, ("register", self.incarnation_id))
            return
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + HEARTBEAT_MS
            self.send(CONTROLLER, ("heartbeat", self.replicas.broker_epoch, self.image_offset))
        if self.id not in self.sim.network.isolated and self.sim.rng.random() < 0.3:
            image, offset = self.sim.controller_image()
            if image is not self.replicas.image:
                self.image_offset = offset
                self.replicas.apply_image(image, now)
        for message in self.replicas.poll(now):
            if isinstance(message, ToController):
                self.send(CONTROLLER, ("alter", message.request), message.proposals)
            else:
                self.send(message.leader_id, message.request)
        if now >= self.next_flush:
            self.next_flush = now + self.sim.rng.randint(100, 800)
            for partition in self.partitions.values():
                partition.log.flush()
                self.durable[partition.log.directory.name] = record_durable_sizes(partition.log.directory)
        if now >= self.next_checkpoint:
            self.next_checkpoint = now + 500
            self.replicas.checkpoint_high_watermarks()

    # -- requests and replies --

    def receive(self, envelope: Envelope) -> None:
        now = self.sim.now
        body = envelope.body
        source = envelope.source
        if isinstance(body, FetchRequestData):
            self.replicas.fetch_for_follower(
                body, now, lambda answers: self.send(source, ("reply", answers), body)
            )
        elif isinstance(body, EpochRequestData):
            answers = {
                key: self.replicas.last_offset_for_leader_epoch(key, current, epoch, require_leader=True)
                for key, (current, epoch) in body.partitions.items()
            }
            self.send(source, ("reply", answers), body)
        elif isinstance(body, LeaderOffsetsRequestData):
            answers = {
                key: self.replicas.leader_offsets(key, current) for key, current in body.partitions.items()
            }
            self.send(source, ("reply", answers), body)
        elif isinstance(body, ProduceMsg):
            self._produce(envelope, body, now)
        elif isinstance(body, tuple) and body[0] == "reply":
            self.replicas.handle_fetcher_response(source, envelope.request, body[1], now)
        elif isinstance(body, tuple) and body[0] == "registered":
            error, epoch = body[1], body[2]
            if error == ErrorCode.NONE and envelope.request == self.incarnation_id:
                self.registered = True
                self.replicas.broker_epoch = epoch
                self.next_heartbeat = now
        elif isinstance(body, tuple) and body[0] == "altered":
            self.replicas.handle_alter_partition_response(envelope.request, body[1], now)

    def _produce(self, envelope: Envelope, msg: ProduceMsg, now: int) -> None:
        source = envelope.source
        partition = self.partitions.get(KEY)
        epoch = partition.leader_epoch if partition is not None else -1
        batches = records.validate_produce_records(bytearray(msg.raw))
        header = batches[0][0]
        try:
            result = self.replicas.append(
                KEY,
                batches,
                now,
                required_acks=-1,
                timeout_ms=REQUEST_TIMEOUT_MS,
                on_complete=lambda result, error: self._produced(source, msg, result, error),
            )
        except KafkaError as exc:
            true_leader = self.sim.is_true_leader(self.id, epoch)
            self.send(source, ProduceReply(msg.attempt, error_code_for(exc), from_true_leader=true_leader))
            return
        self.sim.stats["appends"] += 1
        batch_key = (header.producer_id, header.base_sequence)
        if result.duplicate:
            self.sim.stats["duplicates"] += 1
            if self.sim.first_written_by.get(batch_key) != self.id:
                # The seeds' first story: the batch reached this broker by replication only, and its
                # producer state answers the retry with the original offset.
                self.sim.stats["failover_duplicates"] += 1
        else:
            self.sim.first_written_by[batch_key] = self.id

    def _produced(self, source: Any, msg: ProduceMsg, result: Any, error: ErrorCode) -> None:
        partition = self.partitions.get(KEY)
        if error == ErrorCode.NONE and (
            partition is None or result.base_offset >= partition.log.high_watermark
        ):
            self.sim.violations.append(
                f"broker {self.id} acknowledged offset {result.base_offset} above its high watermark"
            )
        offset = result.base_offset if error == ErrorCode.NONE else -1
        self.send(source, ProduceReply(msg.attempt, error, offset))


# ---------------------------------------------------------------------------------------------- producer


class SimProducer:
    def __init__(self, sim: Simulation, producer_id: int, batches: int) -> None:
        self.sim = sim
        self.id = producer_id
        self.name = f"producer-{producer_id}"
        self.limit = batches
        self.next_seq = 0
        self.attempt = 0
        self.in_flight: tuple[int, bytes] | None = None  # (seq, raw)
        self.sent_at = 0
        self.retry_at = 0
        self.acked: dict[int, int] = {}  # first sequence -> acknowledged base offset
        self.batches_sent = 0

    @property
    def done(self) -> bool:
        return self.in_flight is None and self.batches_sent >= self.limit

    def tick(self, now: int) -> None:
        if self.in_flight is None and not self.done:
            count = 1 + self.sim.rng.randint(0, 2)
            seq = self.next_seq
            values = [(None, b"p%d-s%d" % (self.id, seq + i)) for i in range(count)]
            raw = encode_batch(
                values, producer_id=self.id, producer_epoch=0, base_sequence=seq, timestamp_ms=1_000
            )
            self.in_flight = (seq, raw)
            self.batches_sent += 1
            self.next_seq += count
            self.retry_at = now
        if self.in_flight is not None and now >= self.retry_at:
            self.send(now)

    def send(self, now: int) -> None:
        self.attempt += 1
        self.sent_at = now
        self.retry_at = now + REQUEST_TIMEOUT_MS + 500
        leader = self.sim.leader_for_clients()
        if leader is None:
            self.retry_at = now + 100
            return
        self.sim.network.send(
            now,
            self.name,
            leader,
            Envelope(self.name, 0, ProduceMsg(self.id, self.attempt, self.in_flight[1])),
        )

    def receive(self, envelope: Envelope) -> None:
        reply = envelope.body
        if not isinstance(reply, ProduceReply) or reply.attempt != self.attempt or self.in_flight is None:
            return
        seq = self.in_flight[0]
        if reply.error == ErrorCode.NONE:
            self.acked[seq] = reply.base_offset
            self.in_flight = None
            return
        if reply.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and reply.from_true_leader:
            self.sim.violations.append(
                f"producer {self.id}: sequence {seq} out of order: the leader lacks acknowledged batches of this producer"
            )
        self.retry_at = self.sim.now + 100


# ---------------------------------------------------------------------------------------------- simulation


@dataclass
class Simulation:
    seed: int
    root: Path
    steps: int = 1500
    producers: int = 2
    batches_per_producer: int = 40
    rng: random.Random = field(init=False)
    stats: dict[str, int] = field(
        default_factory=lambda: {"appends": 0, "duplicates": 0, "faults": 0, "leader_changes": 0}
    )
    violations: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.truncate_on_fetch = self.rng.random() < 0.7
        self.stats["truncations"] = 0
        self.stats["failover_duplicates"] = 0
        self.first_written_by: dict[tuple[int, int], int] = {}
        self.now = 0
        self.network = Network(self.rng)
        self.ctl = QuorumController(
            ControllerConfig(
                cluster_id=CLUSTER,
                metadata_max_idle_interval_ms=0,
                broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                auto_leader_rebalance_enable=False,
            ),
            random.Random(self.seed),
        )
        self.meta_log = FakeLog()
        run(self.ctl, self.meta_log, self.ctl.activate(1, 0, 0))
        self.heal_network_at = 0
        self.oracle = Oracle()
        self.oracle_checked: dict[int, int] = {}
        CheckedPartition.sim = self
        self.brokers = {b: SimBroker(self, b) for b in (1, 2, 3)}
        self.clients = {
            p.name: p
            for p in (SimProducer(self, 1000 + i, self.batches_per_producer) for i in range(self.producers))
        }
        self.topic_created = False
        self.down_until: dict[int, int] = {}
        self.next_fault = 4000

    # -- the controller side --

    def controller_image(self) -> tuple[MetadataImage, int]:
        return self.ctl.committed_image, self.ctl.committed_offset

    def _commit(self, result) -> Any:
        return run(self.ctl, self.meta_log, result)

    def controller_receive(self, envelope: Envelope) -> None:
        body = envelope.body
        broker = self.brokers[envelope.source]
        now = self.now
        if body[0] == "register":
            request = BrokerRegistrationRequest(
                broker_id=broker.id,
                cluster_id=CLUSTER,
                incarnation_id=body[1],
                listeners=[
                    BrokerRegistrationRequest.Listener(
                        name="PLAINTEXT", host="127.0.0.1", port=9000, security_protocol=0
                    )
                ],
                features=[
                    BrokerRegistrationRequest.Feature(
                        name="metadata.version", min_supported_version=1, max_supported_version=14
                    )
                ],
                rack=None,
            )
            response = self._commit(self.ctl.register_broker(request, now))
            self.network.send(
                now,
                CONTROLLER,
                broker.id,
                Envelope(
                    CONTROLLER,
                    0,
                    ("registered", ErrorCode(response.error_code), response.broker_epoch),
                    body[1],
                ),
            )
        elif body[0] == "heartbeat":
            request = BrokerHeartbeatRequest(
                broker_id=broker.id,
                broker_epoch=body[1],
                current_metadata_offset=body[2],
                want_fence=False,
                want_shut_down=False,
            )
            self._commit(self.ctl.broker_heartbeat(request, now))
        elif body[0] == "alter":
            response = self._commit(self.ctl.alter_partition(body[1], now))
            self.network.send(
                now, CONTROLLER, broker.id, Envelope(CONTROLLER, 0, ("altered", response), envelope.request)
            )

    # -- what clients see --

    def leader_for_clients(self) -> int | None:
        """The leader a producer would learn from a broker's Metadata answer (a random live one's view)."""
        live = [b for b in self.brokers.values() if b.active]
        if not live:
            return None
        image = self.rng.choice(live).replicas.image
        topic = image.topic(TOPIC)
        if topic is None:
            return None
        leader = topic.partition(0).leader
        return None if leader == NO_LEADER else leader

    # -- checks --

    def is_true_leader(self, broker_id: int, leader_epoch: int) -> bool:
        """Whether ``broker_id`` leads in the committed metadata, in ``leader_epoch`` (not a zombie)."""
        topic = self.ctl.committed_image.topic(TOPIC)
        reg = topic.partition(0) if topic is not None else None
        return reg is not None and reg.leader == broker_id and reg.leader_epoch == leader_epoch

    def on_become_leader(self, broker: SimBroker, partition: ReplicatedPartition) -> None:
        self.stats["leader_changes"] += 1
        self.trace.append(
            f"{self.now}: broker {broker.id} leads epoch {partition.leader_epoch} (LEO {partition.log.log_end_offset}, HW {partition.log.high_watermark})"
        )
        try:
            self.oracle.check_holds_all(broker.id, partition.log)
        except InvariantViolation as exc:
            self.violations.append(str(exc))

    def check(self) -> None:
        for broker in self.brokers.values():
            partition = broker.partitions.get(KEY) if broker.alive else None
            if partition is None:
                continue
            log = partition.log
            checked = min(self.oracle_checked.get(broker.id, 0), log.log_end_offset)
            try:
                self.oracle.check_log(broker.id, log, checked, log.high_watermark)
            except InvariantViolation as exc:
                self.violations.append(str(exc))
            self.oracle_checked[broker.id] = log.high_watermark
        image = self.ctl.committed_image
        topic = image.topic(TOPIC)
        if topic is not None:
            reg = topic.partition(0)
            leader = self.brokers.get(reg.leader)
            if leader is not None and leader.alive and KEY in leader.partitions:
                lp = leader.partitions[KEY]
                if lp.is_leader and lp.leader_epoch == reg.leader_epoch:
                    hw = lp.log.high_watermark
                    for member in reg.isr:
                        b = self.brokers[member]
                        registered = image.broker(member)
                        if (
                            not b.alive
                            or b.broker_epoch is None
                            or registered is None
                            or registered.epoch != b.broker_epoch
                        ):
                            continue
                        mp = b.partitions.get(KEY)
                        if mp is not None and mp.log.log_end_offset < hw:
                            self.violations.append(
                                f"leader {reg.leader} has high watermark {hw} but ISR member {member} ends at {mp.log.log_end_offset}"
                            )
        if self.violations:
            raise InvariantViolation(self.describe())

    def describe(self) -> str:
        lines = [f"seed {self.seed} at {self.now} ms (truncate_on_fetch={self.truncate_on_fetch}):"]
        lines += [f"  violation: {v}" for v in self.violations[:10]]
        lines += [f"  {line}" for line in self.trace[-25:]]
        return "\n".join(lines)

    # -- faults --

    def maybe_fault(self) -> None:
        now = self.now
        for b, until in list(self.down_until.items()):
            if now >= until:
                del self.down_until[b]
                self.brokers[b].start(now)
                self.trace.append(f"{now}: broker {b} restarts")
        if now < self.next_fault or not self.topic_created:
            return
        self.next_fault = now + self.rng.randint(1500, 5000)
        self.stats["faults"] += 1
        choice = self.rng.random()
        live = [b for b in self.brokers.values() if b.alive and b.id not in self.down_until]
        victim = self.rng.choice(live) if live else None
        reg = self.ctl.committed_image.topic(TOPIC).partition(0)
        if (
            victim is not None
            and self.rng.random() < 0.5
            and reg.leader in self.brokers
            and self.brokers[reg.leader].alive
        ):
            victim = self.brokers[reg.leader]  # the leader, more often than not
        if victim is None:
            return
        if choice < 0.3:
            victim.crash(lose_unflushed_data=False)
            self.down_until[victim.id] = now + self.rng.randint(500, 5000)
            self.trace.append(f"{now}: kill -9 broker {victim.id}")
        elif choice < 0.4:
            full = set(reg.isr) == {1, 2, 3} and all(b.alive for b in self.brokers.values())
            if full:
                victim.crash(lose_unflushed_data=True)
                self.down_until[victim.id] = now + self.rng.randint(500, 5000)
                self.trace.append(f"{now}: power loss on broker {victim.id}")
        elif choice < 0.6:
            victim.paused_until = now + self.rng.randint(500, 2 * SESSION_TIMEOUT_MS)
            self.trace.append(f"{now}: SIGSTOP broker {victim.id} until {victim.paused_until}")
        elif choice < 0.75:
            # Cut off from the other brokers and the controller; producers may still reach it (the
            # minority side of a network partition, taking writes it can never commit).
            self.network.isolated = {victim.id}
            self.network.reachable = set(self.clients) if self.rng.random() < 0.5 else set()
            self.heal_network_at = now + self.rng.randint(500, 2 * SESSION_TIMEOUT_MS)
            reach = "reachable by producers" if self.network.reachable else "alone"
            self.trace.append(f"{now}: broker {victim.id} cut off ({reach}) until {self.heal_network_at}")
        elif choice < 0.85:
            from kafka.protocol.admin import ElectLeadersRequest

            request = ElectLeadersRequest(
                election_type=0,
                topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=[0])],
                timeout_ms=1000,
            )
            self._commit(self.ctl.elect_leaders(request, now))
            self.trace.append(f"{now}: preferred leader election")

    # -- running --

    def step(self) -> None:
        self.now += TICK_MS
        now = self.now
        if self.network.isolated and now >= self.heal_network_at:
            self.network.isolated, self.network.reachable = set(), set()
        self.maybe_fault()
        for dest, envelope in self.network.due(now):
            if dest == CONTROLLER:
                self.controller_receive(envelope)
            elif dest in self.clients:
                self.clients[dest].receive(envelope)
            else:
                broker = self.brokers[dest]
                if not broker.alive:
                    continue
                if broker.paused_until > now:
                    broker.inbox.append(envelope)
                else:
                    broker.receive(envelope)
        for result in self.ctl.poll(now):
            self._commit(result)
        if not self.topic_created:
            image = self.ctl.committed_image
            if all(image.is_active(b) for b in self.brokers):
                self._commit(self.ctl.create_topics(create_topics_request((TOPIC, 1, 3, TOPIC_CONFIGS)), now))
                self.topic_created = True
        for broker in self.brokers.values():
            if broker.active:
                broker.tick(now)
        if self.topic_created:
            for client in self.clients.values():
                client.tick(now)
        self.check()

    def run(self) -> None:
        for _ in range(self.steps):
            self.step()
        self.heal_and_settle()

    def heal_and_settle(self) -> None:
        """Stop the faults, restart everyone, and run until the replicas agree and producers are done."""
        self.next_fault = 10**12
        self.network.isolated = set()
        self.network.drop_rate = 0.0
        for b, broker in self.brokers.items():
            if not broker.alive:
                self.down_until[b] = self.now
            broker.paused_until = 0
        for _ in range(4000):
            self.step()
            if self.settled():
                break
        else:
            raise InvariantViolation(self.describe() + "\n  never settled: " + self.state_summary())
        self.final_check()

    def state_summary(self) -> str:
        parts = []
        reg = self.ctl.committed_image.topic(TOPIC).partition(0)
        parts.append(f"leader {reg.leader} epoch {reg.leader_epoch} isr {reg.isr}")
        for b in self.brokers.values():
            p = b.partitions.get(KEY)
            if p is not None:
                parts.append(
                    f"b{b.id}: LEO {p.log.log_end_offset} HW {p.log.high_watermark} epoch {p.leader_epoch}"
                )
        parts.append(f"producers done {[c.done for c in self.clients.values()]}")
        return "; ".join(parts)

    def settled(self) -> bool:
        if not all(c.done for c in self.clients.values()):
            return False
        reg = self.ctl.committed_image.topic(TOPIC).partition(0)
        if set(reg.isr) != {1, 2, 3} or reg.leader == NO_LEADER:
            return False
        ends = set()
        for b in self.brokers.values():
            p = b.partitions.get(KEY)
            if p is None or not b.alive:
                return False
            ends.add((p.log.log_end_offset, p.log.high_watermark))
        return len(ends) == 1

    def final_check(self) -> None:
        logs = [b.partitions[KEY].log for b in self.brokers.values()]
        data = [log.read(log.log_start_offset, 10**9) for log in logs]
        if len(set(data)) != 1:
            self.violations.append("the replicas' logs differ after settling")
        seen: dict[tuple[int, int], int] = {}
        for header, _ in logs[0].iter_batches(0):
            if header.producer_id < 0:
                continue
            key = (header.producer_id, header.base_sequence)
            if key in seen:
                self.violations.append(f"batch {key} stored twice, at {seen[key]} and {header.base_offset}")
            seen[key] = header.base_offset
        for client in self.clients.values():
            for seq, offset in client.acked.items():
                stored = seen.get((client.id, seq))
                if stored != offset:
                    self.violations.append(
                        f"producer {client.id} sequence {seq} was acknowledged at offset {offset}, stored at {stored}"
                    )
        if self.violations:
            raise InvariantViolation(self.describe())
