"""Transactional vs idempotent produce, read_committed vs read_uncommitted consume, and onceflow's
transactional produce vs Tansu's, side by side.

    python bench/transactions.py [--quick] [--records N] [--rounds R]

A confluent-kafka producer sends N records of 1,000 bytes to one partition (acks=all, linger.ms=5,
batch.size=1 MiB): once idempotent, once transactional with 1,000 records per transaction (begin,
1,000 sends, commit). A confluent-kafka consumer then reads the transactional topic back with
read_uncommitted and with read_committed. Contenders run interleaved in ABBA order, at least three
rounds. Reported: the medians with the broker's CPU seconds per GB, the ratios of the medians, the
median of each round's own ratio (steadier when the machine's load drifts), and how long
commit_transaction() took on each broker (median, p90). Targets (issue 4): transactional /
idempotent >= 0.95 (overhead per transaction, not per record), read_committed / read_uncommitted >=
0.95, onceflow / Tansu transactional >= 1.0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, kill_all, measure, median, progress, start_brokers  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FULL = {"records": 200_000, "rounds": 3}
QUICK = {"records": 40_000, "rounds": 3}
RECORD_BYTES = 1_000
RECORDS_PER_TXN = 1_000
PRODUCER_CONF = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1 << 20,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 1 << 20,
}


def create_topic(bootstrap: str) -> str:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)
    return topic


def _send(producer: Producer, topic: str, payload: bytes, first: int, count: int) -> None:
    for i in range(first, first + count):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def produce_idempotent(bootstrap: str, topic: str, records: int, payload: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_CONF})
    _send(producer, topic, payload, 0, records)
    if producer.flush(120):
        raise RuntimeError(f"idempotent produce to {bootstrap}: records left undelivered")


def produce_transactional(
    bootstrap: str, topic: str, records: int, payload: bytes, commit_seconds: list[float] | None = None
) -> None:
    """``commit_seconds`` collects how long each commit_transaction() took (flush of the last
    batches, then EndTxn): the per-transaction cost that idempotent produce does not pay."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", **PRODUCER_CONF}
    )
    producer.init_transactions(30)
    for first in range(0, records, RECORDS_PER_TXN):
        producer.begin_transaction()
        _send(producer, topic, payload, first, min(RECORDS_PER_TXN, records - first))
        started = time.perf_counter()
        producer.commit_transaction(60)
        if commit_seconds is not None:
            commit_seconds.append(time.perf_counter() - started)


def consume(bootstrap: str, topic: str, records: int, isolation: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = empty = 0
        while seen < records:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            if not batch:
                empty += 1
                if empty > 30:
                    raise RuntimeError(
                        f"consume ({isolation}) from {bootstrap}: stuck at {seen} of {records}"
                    )
                continue
            seen += sum(1 for msg in batch if not msg.error())
    finally:
        consumer.close()


def timed(samples: dict, key: str, broker, records: int, job) -> None:
    with measure(broker.pid) as m:
        job()
    r = m.result
    samples.setdefault(key, {"rate": [], "cpu": []})
    samples[key]["rate"].append(records / r.seconds)
    samples[key]["cpu"].append(r.broker_cpu_s / (records * RECORD_BYTES / 1e9))
    progress(
        f"  {key:32s} {records / r.seconds:>10,.0f} rec/s  broker {r.broker_cpu_s:6.2f} cpu-s  ({r.seconds:.2f} s)"
    )


def run_round(brokers: dict, records: int, payload: bytes, samples: dict, round_no: int) -> None:
    """One round; the contenders' order flips every round (ABBA), so that a machine getting busier
    or quieter during the run does not favour whoever always goes first."""
    onceflow = brokers["onceflow"]
    b = onceflow.bootstrap
    commits = samples.setdefault("commit_s", {})
    txn_topic = create_topic(b)

    def idempotent() -> None:
        idem_topic = create_topic(b)
        timed(
            samples,
            "onceflow.produce_idempotent",
            onceflow,
            records,
            lambda: produce_idempotent(b, idem_topic, records, payload),
        )

    def transactional() -> None:
        timed(
            samples,
            "onceflow.produce_transactional",
            onceflow,
            records,
            lambda: produce_transactional(b, txn_topic, records, payload, commits.setdefault("onceflow", [])),
        )

    def tansu_transactional() -> None:
        if "tansu" not in brokers:
            return
        tansu = brokers["tansu"]
        t_topic = create_topic(tansu.bootstrap)
        timed(
            samples,
            "tansu.produce_transactional",
            tansu,
            records,
            lambda: produce_transactional(
                tansu.bootstrap, t_topic, records, payload, commits.setdefault("tansu", [])
            ),
        )

    order = [idempotent, transactional, tansu_transactional]
    for job in order if round_no % 2 else reversed(order):
        job()
    consumes = [("read_uncommitted", "onceflow.consume_read_uncommitted")]
    consumes.append(("read_committed", "onceflow.consume_read_committed"))
    for isolation, key in consumes if round_no % 2 else reversed(consumes):
        timed(samples, key, onceflow, records, lambda iso=isolation: consume(b, txn_topic, records, iso))


def _paired(samples: dict, numerator: str, denominator: str) -> float:
    """Median over rounds of the ratio within each round (robust to a machine whose load drifts)."""
    pairs = zip(samples[numerator]["rate"], samples[denominator]["rate"], strict=False)
    return round(median([a / b for a, b in pairs]), 3)


def summarize(samples: dict, records: int, rounds: int, quick: bool) -> dict:
    commit_s = samples.pop("commit_s", {})
    results = {key: round(median(s["rate"])) for key, s in samples.items()}
    cpu = {key: round(median(s["cpu"]), 2) for key, s in samples.items()}
    commit_ms = {
        broker: {
            "median": round(median(times) * 1e3, 2),
            "p90": round(sorted(times)[int(len(times) * 0.9)] * 1e3, 2),
        }
        for broker, times in commit_s.items()
        if times
    }
    ratios = {
        "onceflow transactional/idempotent": round(
            results["onceflow.produce_transactional"] / results["onceflow.produce_idempotent"], 3
        ),
        "onceflow read_committed/read_uncommitted": round(
            results["onceflow.consume_read_committed"] / results["onceflow.consume_read_uncommitted"], 3
        ),
    }
    if "tansu.produce_transactional" in results:
        ratios["transactional produce onceflow/tansu"] = round(
            results["onceflow.produce_transactional"] / results["tansu.produce_transactional"], 3
        )
    paired = {
        "onceflow transactional/idempotent": _paired(
            samples, "onceflow.produce_transactional", "onceflow.produce_idempotent"
        ),
        "onceflow read_committed/read_uncommitted": _paired(
            samples, "onceflow.consume_read_committed", "onceflow.consume_read_uncommitted"
        ),
    }
    if "tansu.produce_transactional" in results:
        paired["transactional produce onceflow/tansu"] = _paired(
            samples, "onceflow.produce_transactional", "tansu.produce_transactional"
        )
    return {
        "bench": "transactions",
        "unit": "records/s",
        "results": results,
        "ratios": ratios,
        "ratios_paired_by_round": paired,
        "cpu_s_per_gb": cpu,
        "commit_transaction_ms": commit_ms,
        "params": {
            "records": records,
            "record_bytes": RECORD_BYTES,
            "records_per_txn": RECORDS_PER_TXN,
            "rounds": rounds,
            "quick": quick,
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
    parser.add_argument("--records", type=int, help="records per contender per round")
    parser.add_argument("--rounds", type=int, help="rounds")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    records = args.records or preset["records"]
    rounds = args.rounds or preset["rounds"]
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]
    brokers, tmp = start_brokers()
    try:
        samples: dict = {}
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: {records:,} records of {RECORD_BYTES} bytes")
            run_round(brokers, records, payload, samples, round_no)
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
