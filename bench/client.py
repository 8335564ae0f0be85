"""Client throughput: onceflow's client vs aiokafka vs confluent-kafka against one onceflow broker.

    python bench/client.py [--quick] [--records N] [--rounds R] [--phases produce,...]

Produce: N records of 1,000 bytes to one partition, idempotent, acks=all, linger.ms=5, the same
batch.size for every client (``--batch-size``, default 256 KiB; librdkafka's default is 1 MB, Kafka's
16 KiB). Each (phase, contender) runs in its own subprocess, so its peak RSS is its own; contenders
are interleaved round by round and medians reported. Targets: onceflow >= 1.5x aiokafka and
>= 0.5x confluent-kafka.

The script is a table of phases and contenders (``PHASES``): a phase is a setup step plus one worker
function per contender, called in the worker subprocess as ``fn(bootstrap, topic, records, args)``
and returning the number of records handled.

Consume: the same N x 1 KB records (one partition, filled once per run) read from the beginning by
each client with manual assignment, records counted as they arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, emit, kill_all, median, produce_to_partition_0, progress  # noqa: E402

FULL = {"records": 300_000, "rounds": 3}
QUICK = {"records": 60_000, "rounds": 2}
RECORD_BYTES = 1_000
PAYLOAD = b"x" * RECORD_BYTES


# -- produce workers (run inside the worker subprocess) -------------------------------------------


def produce_onceflow(bootstrap: str, topic: str, records: int, args) -> int:
    from onceflow.client.producer import AsyncProducer

    async def run() -> int:
        producer = AsyncProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.size": args.batch_size,
                "buffer.memory": 64 << 20,
            }
        )
        await producer.start()
        send = producer.send
        futures = []
        for i in range(records):
            futures.append(await send(topic, PAYLOAD, b"%d" % i, partition=0))
        await producer.flush()
        failed = sum(1 for f in futures if f.batch.error is not None)
        await producer.close()
        if failed:
            raise RuntimeError(f"{failed} records failed: {futures[-1].batch.error}")
        return records

    return asyncio.run(run())


def produce_aiokafka(bootstrap: str, topic: str, records: int, args) -> int:
    from aiokafka import AIOKafkaProducer

    async def run() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=args.batch_size,
            max_request_size=max(1048576, args.batch_size + 4096),
        )
        await producer.start()
        futures = []
        for i in range(records):
            futures.append(await producer.send(topic, PAYLOAD, key=b"%d" % i, partition=0))
        await producer.flush()
        results = await asyncio.gather(*futures, return_exceptions=True)
        await producer.stop()
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise RuntimeError(f"{len(failed)} records failed: {failed[0]!r}")
        return records

    return asyncio.run(run())


def produce_confluent(bootstrap: str, topic: str, records: int, args) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": args.batch_size,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    produce_to_partition_0(producer, topic, records, PAYLOAD, "confluent produce")
    return records


def setup_produce(bootstrap: str, records: int, round_no: int, contender: str) -> str:
    """A fresh one-partition topic per run (created by the broker on first metadata request)."""
    return f"bench-produce-{contender}-{round_no}-{uuid.uuid4().hex[:6]}"


# -- consume workers: read the same pre-filled topic from the beginning ------------------------------

_CONSUME_TOPICS: dict[int, str] = {}


def setup_consume(bootstrap: str, records: int, round_no: int, contender: str) -> str:
    """One topic per bench run, filled once (N x 1 KB in 256 KiB batches) and read by every contender."""
    if records not in _CONSUME_TOPICS:
        from onceflow.client import AsyncClient
        from onceflow.protocol.record_codec import encode_batch

        topic = f"bench-consume-{uuid.uuid4().hex[:6]}"

        async def fill() -> None:
            per_batch = 256
            batch = encode_batch([(None, PAYLOAD)] * per_batch)
            async with AsyncClient(bootstrap) as client:
                await client.create_topic(topic, partitions=1)
                left = records
                while left > 0:
                    n = min(per_batch, left)
                    await client.produce(
                        topic, 0, batch if n == per_batch else encode_batch([(None, PAYLOAD)] * n)
                    )
                    left -= n

        asyncio.run(fill())
        _CONSUME_TOPICS[records] = topic
    return _CONSUME_TOPICS[records]


def consume_onceflow(bootstrap: str, topic: str, records: int, args) -> int:
    from onceflow.client.consumer import AsyncConsumer, TopicPartition

    async def run() -> int:
        seen = 0
        async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            while seen < records:
                for batch in (await consumer.getmany(timeout_ms=1000, max_records=10_000)).values():
                    seen += len(batch)
        return seen

    return asyncio.run(run())


def consume_aiokafka(bootstrap: str, topic: str, records: int, args) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> int:
        seen = 0
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            while seen < records:
                for batch in (await consumer.getmany(timeout_ms=1000, max_records=10_000)).values():
                    seen += len(batch)
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, records: int, args) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})  # fmt: skip
    seen = 0
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while seen < records:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is None:
                    seen += 1
    finally:
        consumer.close()
    return seen


# name -> (setup(bootstrap, records, round, contender) -> topic, {contender: worker})
PHASES: dict[str, tuple[Callable, dict[str, Callable]]] = {
    "produce": (
        setup_produce,
        {"onceflow": produce_onceflow, "aiokafka": produce_aiokafka, "confluent": produce_confluent},
    ),
    "consume": (
        setup_consume,
        {"onceflow": consume_onceflow, "aiokafka": consume_aiokafka, "confluent": consume_confluent},
    ),
}


# -- driver -----------------------------------------------------------------------------------------


def run_worker(args) -> None:
    _setup, workers = PHASES[args.phase]
    start = time.perf_counter()
    count = workers[args.contender](args.bootstrap, args.topic, args.records, args)
    seconds = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"records": count, "seconds": seconds, "peak_rss_mb": rss_mb}))


def run_one(phase: str, contender: str, bootstrap: str, topic: str, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--phase", phase,
        "--contender", contender,
        "--bootstrap", bootstrap,
        "--topic", topic,
        "--records", str(args.records),
        "--batch-size", str(args.batch_size),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{phase}/{contender} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--batch-size", type=int, default=262144)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--contenders", default="onceflow,aiokafka,confluent")
    # worker mode (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    defaults = QUICK if args.quick else FULL
    args.records = args.records or defaults["records"]
    rounds = args.rounds or defaults["rounds"]
    phases = [p for p in args.phases.split(",") if p]
    contenders = [c for c in args.contenders.split(",") if c]
    import tempfile

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-client-")
    broker = BrokerProcess(Path(tmp.name) / "onceflow")
    broker.start()
    progress(f"onceflow on {broker.bootstrap} (pid {broker.pid})")
    samples: dict[str, dict[str, list[dict]]] = {p: {c: [] for c in contenders} for p in phases}
    try:
        for round_no in range(rounds):
            for phase in phases:
                setup, workers = PHASES[phase]
                order = contenders[round_no % len(contenders) :] + contenders[: round_no % len(contenders)]
                for contender in order:
                    if contender not in workers:
                        continue
                    topic = setup(broker.bootstrap, args.records, round_no, contender)
                    result = run_one(phase, contender, broker.bootstrap, topic, args)
                    samples[phase][contender].append(result)
                    progress(
                        f"round {round_no + 1} {phase:8s} {contender:9s} "
                        f"{result['records'] / result['seconds']:>10,.0f} rec/s  rss {result['peak_rss_mb']:.0f} MB"
                    )
    finally:
        broker.stop()
        kill_all()
        tmp.cleanup()
    summary: dict = {"bench": "client", "records": args.records, "record_bytes": RECORD_BYTES,
                     "batch_size": args.batch_size, "rounds": rounds}  # fmt: skip
    for phase, by_contender in samples.items():
        for contender, runs in by_contender.items():
            if not runs:
                continue
            rate = median([r["records"] / r["seconds"] for r in runs])
            summary[f"{phase}_{contender}_rec_s"] = round(rate)
            summary[f"{phase}_{contender}_peak_rss_mb"] = round(max(r["peak_rss_mb"] for r in runs), 1)
        ours = summary.get(f"{phase}_onceflow_rec_s")
        for peer in ("aiokafka", "confluent"):
            theirs = summary.get(f"{phase}_{peer}_rec_s")
            if ours and theirs:
                summary[f"{phase}_onceflow_vs_{peer}"] = round(ours / theirs, 2)
    emit(summary)


if __name__ == "__main__":
    main()
