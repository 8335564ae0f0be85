"""Consumer-group latency: onceflow vs Tansu, side by side.

    python bench/groups.py [--quick] [--rounds R]

Per round and broker, on a fresh 6-partition topic holding 10 records per partition and a fresh
group of confluent-kafka consumers (session.timeout.ms=10000, heartbeat.interval.ms=1000):

- ``one_member_s``: subscribe -> first record, one consumer alone in a new group;
- ``three_member_s``: three consumers subscribe at once -> every one has received a record;
- ``rebalance_after_leave_s``: one of those three closes (LeaveGroup) -> the two left own all six
  partitions again.

onceflow runs with ``group.initial.rebalance.delay.ms=0`` (what ``onceflow serve --dev`` is for; the
Kafka default, 3000, would add 3 s to every new group); Tansu with its defaults. Rounds are
interleaved (onceflow, tansu, onceflow, ...), medians reported; ratios are tansu/onceflow, so above 1
means onceflow is faster.

``onceflow.consumer_protocol`` runs the same three steps on the same broker with the consumer group
protocol of KIP-848 (``group.protocol=consumer``; the broker's ``group.consumer.heartbeat.interval.ms``
set to 1000 like the classic consumers' heartbeat.interval.ms, session timeout the broker's 45 s):
the coordinator assigns, and members learn of a rebalance at their next heartbeat instead of
rejoining. Its ratio to the classic protocol on onceflow is reported as ``consumer/classic`` (below 1:
the consumer protocol is faster).

``client.classic`` and ``client.consumer_protocol`` run the same steps on onceflow with our own
blocking ``onceflow.client.Consumer`` instead of confluent-kafka's (same timings), so our client's
consumer protocol is compared with its classic protocol and with librdkafka's consumer protocol.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, kill_all, median, progress, start_brokers  # noqa: E402
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from onceflow.client import Consumer as OnceflowConsumer  # noqa: E402

FULL = {"rounds": 5}
QUICK = {"rounds": 3}
PARTITIONS = 6
RECORDS_PER_PARTITION = 10
SESSION_MS = 10_000
TIMEOUT_S = 60.0
METRICS = ("one_member_s", "three_member_s", "rebalance_after_leave_s")


def prepare_topic(bootstrap: str) -> str:
    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        for _ in range(RECORDS_PER_PARTITION):
            producer.produce(topic, b"x", partition=p)
    if producer.flush(30) != 0:
        raise RuntimeError("records not delivered")
    return topic


HEARTBEAT_MS = 1000
CONSUMER_PROTOCOL = "onceflow.consumer_protocol"
OUR_CLASSIC = "client.classic"
OUR_CONSUMER_PROTOCOL = "client.consumer_protocol"


class _Record:
    def error(self) -> None:
        return None


class OurConsumer:
    """Our blocking Consumer behind the four confluent-kafka methods the steps use."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "group.protocol": protocol,
        }
        if protocol == "classic":
            config.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
        self._consumer = OnceflowConsumer(config=config)

    def subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(topics)

    def poll(self, timeout_s: float) -> _Record | None:
        return _Record() if self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=1) else None

    def assignment(self):
        return self._consumer.assignment()  # TopicPartition tuples, with .partition

    def close(self) -> None:
        self._consumer.close()


def new_consumer(bootstrap: str, group: str, protocol: str = "classic", ours: bool = False):
    if ours:
        return OurConsumer(bootstrap, group, protocol)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    else:  # KIP-848: the broker sets both timings
        config["group.protocol"] = "consumer"
    return Consumer(config)


def first_record(consumer: Consumer, topic: str, started: float) -> float:
    """Seconds from ``started`` until ``consumer`` (already created) subscribes and gets a record."""
    consumer.subscribe([topic])
    deadline = started + TIMEOUT_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is not None and not msg.error():
            return time.monotonic() - started
    raise TimeoutError(f"no record within {TIMEOUT_S}s")


def one_member(bootstrap: str, topic: str, protocol: str, ours: bool) -> float:
    consumer = new_consumer(bootstrap, f"g1-{uuid.uuid4().hex[:8]}", protocol, ours)
    try:
        return first_record(consumer, topic, time.monotonic())
    finally:
        consumer.close()


class Member(threading.Thread):
    """A consumer that polls in its own thread until told to stop, remembering its assignment."""

    def __init__(self, consumer: Consumer, topic: str, started: float):
        super().__init__(daemon=True)
        self.consumer, self.topic, self.started = consumer, topic, started
        self.first_s: float | None = None
        self.assigned: set[int] = set()
        self.stop_polling = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.first_s = first_record(self.consumer, self.topic, self.started)
            while not self.stop_polling.is_set():
                self.consumer.poll(0.05)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def three_members_then_leave(bootstrap: str, topic: str, protocol: str, ours: bool) -> tuple[float, float]:
    group = f"g3-{uuid.uuid4().hex[:8]}"
    consumers = [new_consumer(bootstrap, group, protocol, ours) for _ in range(3)]
    started = time.monotonic()
    members = [Member(c, topic, started) for c in consumers]
    for m in members:
        m.start()
    try:
        deadline = started + TIMEOUT_S
        while time.monotonic() < deadline and not all(m.first_s is not None or m.error for m in members):
            time.sleep(0.01)
        for m in members:
            if m.error or m.first_s is None:
                raise RuntimeError(f"member failed: {m.error or 'timeout'}")
        joined = max(m.first_s for m in members)
        # wait until the three share the partitions, then one leaves
        while time.monotonic() < deadline and sorted(p for m in members for p in m.assigned) != list(
            range(PARTITIONS)
        ):
            time.sleep(0.01)
        leaver, stayers = members[0], members[1:]
        leaver.stop_polling.set()
        leaver.join()
        left_at = time.monotonic()
        leaver.consumer.close()  # sends LeaveGroup
        deadline = left_at + TIMEOUT_S
        while time.monotonic() < deadline:
            owned = sorted(p for m in stayers for p in m.assigned)
            if owned == list(range(PARTITIONS)):
                return joined, time.monotonic() - left_at
            time.sleep(0.005)
        raise TimeoutError("the two remaining members never owned every partition")
    finally:
        for m in members:
            m.stop_polling.set()
        for m in members:
            m.join(timeout=10)
        for m in members[1:]:
            m.consumer.close()


def run_round(name: str, broker, samples: dict, protocol: str = "classic", ours: bool = False) -> None:
    topic = prepare_topic(broker.bootstrap)
    one = one_member(broker.bootstrap, topic, protocol, ours)
    three, rebalance = three_members_then_leave(broker.bootstrap, topic, protocol, ours)
    for metric, value in zip(METRICS, (one, three, rebalance), strict=True):
        samples[name][metric].append(value)
    progress(f"  {name}: 1 member {one:.3f}s, 3 members {three:.3f}s, rebalance after leave {rebalance:.3f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds, under 60 s")
    parser.add_argument("--rounds", type=int, help="rounds (each runs every broker once)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (QUICK if args.quick else FULL)["rounds"]
    brokers, tmp = start_brokers(
        (
            "--config",
            "group.initial.rebalance.delay.ms=0",
            "--config",
            f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
        )
    )
    try:
        contenders = [(name, broker, "classic", False) for name, broker in brokers.items()]
        contenders[1:1] = [
            (CONSUMER_PROTOCOL, brokers["onceflow"], "consumer", False),
            (OUR_CLASSIC, brokers["onceflow"], "classic", True),
            (OUR_CONSUMER_PROTOCOL, brokers["onceflow"], "consumer", True),
        ]
        samples = {name: {m: [] for m in METRICS} for name, *_ in contenders}
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}")
            for name, broker, protocol, ours in contenders:
                run_round(name, broker, samples, protocol, ours)
    finally:
        for broker in brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()
    results = {
        name: {m: round(median(v), 3) for m, v in metrics.items()} for name, metrics in samples.items()
    }
    ratios = {}
    for m in METRICS:
        if "tansu" in results:
            ratios[f"{m} tansu/onceflow"] = round(results["tansu"][m] / results["onceflow"][m], 2)
        ratios[f"{m} onceflow consumer/classic"] = round(
            results[CONSUMER_PROTOCOL][m] / results["onceflow"][m], 2
        )
        ratios[f"{m} our client consumer/classic"] = round(
            results[OUR_CONSUMER_PROTOCOL][m] / results[OUR_CLASSIC][m], 2
        )
        ratios[f"{m} consumer protocol our client/librdkafka"] = round(
            results[OUR_CONSUMER_PROTOCOL][m] / results[CONSUMER_PROTOCOL][m], 2
        )
    emit(
        {
            "bench": "groups",
            "unit": "seconds (median)",
            "results": results,
            "ratios": ratios,
            "params": {
                "rounds": rounds,
                "quick": args.quick,
                "partitions": PARTITIONS,
                "client": "confluent-kafka; client.* contenders: onceflow.client.Consumer",
                "session_timeout_ms": SESSION_MS,
                "onceflow_group_initial_rebalance_delay_ms": 0,
                "onceflow_group_consumer_heartbeat_interval_ms": HEARTBEAT_MS,
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
