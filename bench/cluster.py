"""A 3-broker cluster against a single broker, in the same run; metadata-change latency; controller
failover time.

    python bench/cluster.py [--quick] [--records N] [--rounds R]

- **Produce / consume**: a confluent-kafka producer sends N records of 1,000 bytes spread over a
  6-partition topic (replication factor 1, acks=all, linger.ms=5), then a consumer reads them all
  back; once against a single `onceflow serve`, once against a 3-node combined cluster (its
  partitions led by all three brokers), interleaved, medians reported.
- **Metadata-change latency**: from sending CreateTopics to the moment every broker of the cluster
  answers Metadata with the topic and a leader for each partition (the issue's target: 1 s on loopback).
- **Controller failover**: kill -9 the active controller; the time until the remaining voters report
  a new leader and a CreateTopics through them succeeds (target: election timeout + 2 s).

Process CPU is not compared here (the cluster's work is spread over three processes); the single
broker's produce/consume benchmarks (bench/produce_consume.py) measure that.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, emit, kill_all, median, progress  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.metadata import MetadataRequest  # noqa: E402
from tests.helpers.cluster import ClusterNodes, quorum  # noqa: E402

from onceflow.client.connection import Connection  # noqa: E402  (imported before anything is timed)

FULL = {"records": 300_000, "rounds": 3, "latency_samples": 10}
QUICK = {"records": 60_000, "rounds": 3, "latency_samples": 5}
RECORD_BYTES = 1_000
PARTITIONS = 6
ELECTION_TIMEOUT_MS = 1000  # controller.quorum.election.timeout.ms (Kafka's default)


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, records: int, payload: bytes) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    errors: list = []
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic,
                    payload,
                    partition=i % PARTITIONS,
                    on_delivery=lambda err, _m: err is not None and errors.append(err),
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"produce to {bootstrap}: {left} undelivered, {len(errors)} failed: {errors[:1]}")


def consume(bootstrap: str, topic: str, records: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen, empty = 0, 0
        while seen < records:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            if not batch:
                empty += 1
                if empty > 30:
                    raise RuntimeError(f"consume from {bootstrap}: stuck at {seen} of {records}")
                continue
            seen += sum(1 for msg in batch if not msg.error())
    finally:
        consumer.close()


def run_round(name: str, bootstrap: str, records: int, payload: bytes, samples: dict) -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    for phase, job in (("produce", produce), ("consume", consume)):
        started = time.perf_counter()
        if phase == "produce":
            job(bootstrap, topic, records, payload)
        else:
            job(bootstrap, topic, records)
        seconds = time.perf_counter() - started
        samples[name][phase].append(records / seconds)
        progress(f"  {name:8s} {phase:7s} {records / seconds:>10,.0f} rec/s  ({seconds:.2f} s)")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive: its futures die with it
    admin.delete_topics([topic])[topic].result(timeout=30)


async def _metadata(port: int, topic: str):
    conn = await Connection.open("127.0.0.1", port)
    try:
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
            allow_auto_topic_creation=False,
        )
        return await conn.send(request, version=12)
    finally:
        await conn.close()


def _usable_everywhere(ports: list[int], topic: str) -> bool:
    for port in ports:
        answer = asyncio.run(_metadata(port, topic)).topics[0]
        if answer.error_code or len(answer.partitions) != PARTITIONS:
            return False
        if any(p.leader_id < 0 for p in answer.partitions):
            return False
    return True


def metadata_latency(cluster: ClusterNodes, samples: int) -> list[float]:
    ports = [node.port for node in cluster.nodes.values()]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    results = []
    for _ in range(samples):
        topic = f"lat-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
        while not _usable_everywhere(ports, topic):
            time.sleep(0.005)
        results.append(time.perf_counter() - started)
        progress(f"  topic create to usable on all brokers: {results[-1] * 1000:.0f} ms")
    return results


def failover(cluster: ClusterNodes) -> float:
    leader = quorum(cluster.bootstrap).leader_id
    victim = cluster.nodes[leader]
    others = ",".join(n.bootstrap for n in cluster.nodes.values() if n is not victim)
    started = time.perf_counter()
    victim.kill9()
    while True:
        try:
            state = quorum(others)
            if state.leader_id not in (-1, leader):
                topic = f"failover-{uuid.uuid4().hex[:8]}"
                admin = AdminClient({"bootstrap.servers": others})  # kept alive while its future waits
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
                break
        except Exception:  # the old leader's clients see errors until the new one answers
            pass
        if time.perf_counter() - started > 60:
            raise RuntimeError("no new controller within 60 s")
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    progress(f"  kill -9 of controller {leader} to a CreateTopics answered: {seconds * 1000:.0f} ms")
    victim.restart()
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args(argv)
    settings = dict(QUICK if args.quick else FULL)
    if args.records:
        settings["records"] = args.records
    if args.rounds:
        settings["rounds"] = args.rounds
    records, rounds = settings["records"], settings["rounds"]
    payload = b"x" * RECORD_BYTES
    samples = {name: {"produce": [], "consume": []} for name in ("single", "cluster3")}
    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-cluster-")
    try:
        single = BrokerProcess(Path(tmp.name) / "single")
        single.start()
        cluster = ClusterNodes(Path(tmp.name) / "cluster", 3).start()
        progress(f"single broker on {single.bootstrap}; cluster on {cluster.bootstrap}")
        for round_ in range(rounds):
            progress(f"round {round_ + 1}/{rounds}")
            run_round("single", single.bootstrap, records, payload, samples)
            run_round("cluster3", cluster.bootstrap, records, payload, samples)
        latencies = metadata_latency(cluster, settings["latency_samples"])
        failover_s = failover(cluster)
        cluster.stop()
        single.stop()
    finally:
        kill_all()
        tmp.cleanup()
    results = {
        f"{name}_{phase}": round(median(values))
        for name, phases in samples.items()
        for phase, values in phases.items()
    }
    emit(
        {
            "bench": "cluster",
            "unit": "records/s (produce, consume); seconds (latency, failover)",
            "results": {
                **results,
                "metadata_change_latency_s": round(median(latencies), 3),
                "metadata_change_latency_max_s": round(max(latencies), 3),
                "controller_failover_s": round(failover_s, 3),
            },
            "ratios": {
                "cluster3/single_produce": round(results["cluster3_produce"] / results["single_produce"], 2),
                "cluster3/single_consume": round(results["cluster3_consume"] / results["single_consume"], 2),
            },
            "targets": {
                "metadata_change_latency_s": 1.0,
                "controller_failover_s": ELECTION_TIMEOUT_MS / 1000 + 2,
            },
            "params": {
                "records": records,
                "record_bytes": RECORD_BYTES,
                "partitions": PARTITIONS,
                "rounds": rounds,
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
