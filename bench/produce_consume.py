"""Produce then consume N records through onceflow and Tansu, side by side.

    python bench/produce_consume.py [--quick] [--records N] [--rounds R]

A confluent-kafka producer sends N records of 1,000 bytes to one partition (acks=all,
linger.ms=5, batch.size=1 MiB, no compression), then a confluent-kafka consumer reads them all
back. onceflow writes to disk in a temp dir; Tansu keeps everything in memory. The brokers run
interleaved (onceflow, tansu, onceflow, tansu, ...) and the medians are reported. For each phase
the broker process's and the client's CPU seconds per GB moved are measured from /proc: the
target is a broker that spends less CPU per byte than the client driving it.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    delete_topic,
    emit,
    kill_all,
    measure,
    median,
    produce_to_partition_0,
    progress,
    start_brokers,
)  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FULL = {"records": 300_000, "rounds": 3}
QUICK = {"records": 100_000, "rounds": 3}
RECORD_BYTES = 1_000
PHASES = ("produce", "consume")


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, records: int, payload: bytes) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    produce_to_partition_0(producer, topic, records, payload, f"produce to {bootstrap}")


def consume(bootstrap: str, topic: str, records: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        empty_polls = 0
        while seen < records:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            if not batch:
                empty_polls += 1
                if empty_polls > 30:
                    raise RuntimeError(f"consume from {bootstrap}: stuck at {seen} of {records}")
                continue
            for msg in batch:
                if msg.error():
                    raise RuntimeError(f"consume from {bootstrap}: {msg.error()}")
            seen += len(batch)
    finally:
        consumer.close()


def run_round(name: str, broker, records: int, payload: bytes, samples: dict) -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    gigabytes = records * RECORD_BYTES / 1e9
    for phase in PHASES:
        with measure(broker.pid) as m:
            if phase == "produce":
                produce(broker.bootstrap, topic, records, payload)
            else:
                consume(broker.bootstrap, topic, records)
        r = m.result
        samples[name][phase]["rate"].append(records / r.seconds)
        samples[name][phase]["broker_cpu_s_per_gb"].append(r.broker_cpu_s / gigabytes)
        samples[name][phase]["client_cpu_s_per_gb"].append(r.client_cpu_s / gigabytes)
        progress(
            f"  {name:8s} {phase:7s} {records / r.seconds:>10,.0f} rec/s  "
            f"broker {r.broker_cpu_s:6.2f} cpu-s  client {r.client_cpu_s:6.2f} cpu-s  ({r.seconds:.2f} s)"
        )
    delete_topic(broker.bootstrap, topic)


def summarize(samples: dict, records: int, rounds: int, quick: bool) -> dict:
    results, ratios, cpu = {}, {}, {}
    for name, phases in samples.items():
        cpu[name] = {}
        cpu.setdefault("client", {})[name] = {}
        for phase in PHASES:
            results[f"{name}.{phase}"] = round(median(phases[phase]["rate"]))
            cpu[name][phase] = round(median(phases[phase]["broker_cpu_s_per_gb"]), 2)
            cpu["client"][name][phase] = round(median(phases[phase]["client_cpu_s_per_gb"]), 2)
    if "tansu" in samples:
        for phase in PHASES:
            ratios[f"{phase} onceflow/tansu"] = round(
                results[f"onceflow.{phase}"] / results[f"tansu.{phase}"], 3
            )
    for phase in PHASES:  # the target: below 1 means the broker works less per byte than the client
        ratios[f"{phase} onceflow broker/client cpu"] = round(
            cpu["onceflow"][phase] / cpu["client"]["onceflow"][phase], 3
        )
    return {
        "bench": "produce_consume",
        "unit": "records/s",
        "results": results,
        "ratios": ratios,
        "cpu_s_per_gb": cpu,
        "params": {
            "records": records,
            "record_bytes": RECORD_BYTES,
            "rounds": rounds,
            "quick": quick,
            "acks": "all",
            "linger_ms": 5,
            "batch_size": 1 << 20,
            "partitions": 1,
            "onceflow_storage": "disk (temp dir)",
            "tansu_storage": "memory",
            "cpus": os.cpu_count(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller run, under 60 s")
    parser.add_argument("--records", type=int, help="records per round")
    parser.add_argument("--rounds", type=int, help="rounds (each runs every broker once)")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    records = args.records or preset["records"]
    rounds = args.rounds or preset["rounds"]
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]

    brokers, tmp = start_brokers()
    try:
        samples = {
            name: {
                phase: {"rate": [], "broker_cpu_s_per_gb": [], "client_cpu_s_per_gb": []} for phase in PHASES
            }
            for name in brokers
        }
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: {records:,} records of {RECORD_BYTES} bytes")
            for name, broker in brokers.items():  # interleaved: onceflow, tansu, onceflow, tansu, ...
                run_round(name, broker, records, payload, samples)
        result = summarize(samples, records, rounds, args.quick)
    finally:
        for broker in brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
