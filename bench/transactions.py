"""Transactional vs idempotent produce, read_committed vs read_uncommitted consume, and onceflow's
transactional produce vs Tansu's, side by side.

    python bench/transactions.py [--quick] [--records N] [--rounds R] [--producers P]

Produce: confluent-kafka producers send N records of 1,000 bytes (acks=all, linger.ms=5, batch.size
1 MiB, message.max.bytes 1,048,588), once idempotent, once transactional with 1,000 records per
transaction (begin, 1,000 sends, commit), measured two ways:

- one producer to one partition. Each commit_transaction() is synchronous: it sends what is still
  queued (with linger.ms=5 and 1,000 records produced in ~2 ms, that is the whole 1 MB) and waits
  for EndTxn, while the idempotent producer keeps five requests in flight. This measures one
  client's commit latency, not the broker's overhead per transaction. librdkafka's in-process mock
  cluster (``mock.*``, C, no disk, no socket) runs both loops as the reference: its own
  transactional/idempotent ratio is the most this client reaches on this machine with a broker that
  costs nothing.
- P producers at once (separate processes, default 4), each with its own partition and
  transactional.id, 2N/P records each, timed from the moment all of them have set up their producer:
  commits of one producer overlap the others' sends, so the ratio shows what the transactions cost
  per transaction when the machine is kept busy — the quantity issue 4's target is about ("overhead
  per transaction, not per record"). Processes rather than threads, so that no producer waits for
  another's GIL (with threads, the idempotent ones, which never block, lost more to it than the
  transactional ones, which wait for commits, and the ratio came out above 1). The same processes run
  against Tansu and against the mock cluster as references.

Every producer is set up and warmed up before its timed part (one acknowledged record, or one
committed one-record transaction): librdkafka's idempotent producer sends nothing for its first ~0.5 s,
and init_transactions takes its own time, neither of which is a cost of transactions.

Scheduling matters on a small machine: the broker runs in a session of its own (as a service would),
so with the kernel's autogroup scheduling it gets a fair share against all producer processes together.
Started in the producers' session instead, it is starved by them, the idempotent baseline loses about
a third, and the concurrent ratio comes out near 1 for that reason alone.

A confluent-kafka consumer then reads the single-producer transactional topic back with
read_uncommitted and with read_committed, timed from the moment it is connected (its set-up is the
same for both and was a noisy share of a ~0.4 s phase), ``CONSUME_REPEATS`` times each per round.
Contenders run interleaved in ABBA order, at least three rounds. Reported: the medians with the
broker's CPU seconds per GB and the share of the machine's CPU time left idle, the ratios of the
medians, the median of each round's own ratio (steadier when the machine's load drifts), and how long
commit_transaction() took (median, p90). Targets (issue 4): transactional / idempotent >= 0.95,
read_committed / read_uncommitted >= 0.95, onceflow / Tansu transactional >= 1.0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import delete_topic, emit, kill_all, measure, median, progress, start_brokers  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FULL = {"records": 200_000, "rounds": 3}
QUICK = {"records": 40_000, "rounds": 3}
RECORD_BYTES = 1_000
RECORDS_PER_TXN = 1_000
# The concurrent runs send this many times N records in all: at 2N each producer runs 100 transactions
# in the full run, and the phase lasts over a second instead of ~0.6 s, which the machine's noise swamped.
CONCURRENT_RECORDS_FACTOR = 2
# A consume phase lasts ~0.4 s and single ones range over +-15% on this machine: each round reads the
# topic back this many times per isolation level, alternating, and every pair is a paired ratio.
CONSUME_REPEATS = 4
PRODUCER_CONF = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1 << 20,
    # The broker's message.max.bytes default. librdkafka caps a batch at its own message.max.bytes
    # (default 1,000,000), which would cut every 1,000-record transaction (~1,016,000 bytes) into a
    # ~985-record batch and a tail of ~15, sent as a second Produce request at commit: an artefact of
    # the two defaults, not a cost of transactions. Idempotent batches grow the same way.
    "message.max.bytes": 1_048_588,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 1 << 20,
}


MOCK = None  # ``bootstrap`` value meaning: librdkafka's mock cluster inside the producer's own handle


def create_topic(bootstrap: str | None, partitions: int = 1) -> str:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    if bootstrap is MOCK:
        return topic  # the mock cluster creates topics on first use
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(
        timeout=30
    )
    return topic


def _where(bootstrap: str | None) -> dict:
    return {"test.mock.num.brokers": 1} if bootstrap is MOCK else {"bootstrap.servers": bootstrap}


def _send(producer: Producer, topic: str, payload: bytes, first: int, count: int, partition: int) -> None:
    for i in range(first, first + count):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, partition=partition)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def idempotent_producer(bootstrap: str | None, topic: str, partition: int = 0) -> Producer:
    """An idempotent producer that has had one record acknowledged. Start-up is kept out of the timed
    part: librdkafka sends its first record ~0.5 s after the producer is made (measured here: it asks
    for a producer id before any broker connection is up and retries on a timer), which in a 200 MB
    run is a third of the time and made the idempotent baseline look slower than it is."""
    producer = Producer({**_where(bootstrap), "enable.idempotence": True, **PRODUCER_CONF})
    producer.produce(topic, b"warm-up", partition=partition)
    if producer.flush(30):
        raise RuntimeError(f"warm-up record to {bootstrap or 'mock'} was not acknowledged")
    return producer


def transactional_producer(bootstrap: str | None, topic: str, partition: int = 0) -> Producer:
    """A transactional producer that has committed one one-record transaction (init_transactions,
    the partition's leader connection and its first AddPartitionsToTxn stay out of the timed part)."""
    producer = Producer(
        {**_where(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", **PRODUCER_CONF}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"warm-up", partition=partition)
    producer.commit_transaction(30)
    return producer


def send_idempotent(producer: Producer, topic: str, records: int, payload: bytes, partition: int = 0) -> None:
    _send(producer, topic, payload, 0, records, partition)
    if producer.flush(120):
        raise RuntimeError("idempotent produce: records left undelivered")


def send_transactional(
    producer: Producer,
    topic: str,
    records: int,
    payload: bytes,
    partition: int = 0,
    commit_seconds: list[float] | None = None,
) -> None:
    """``commit_seconds`` collects how long each commit_transaction() took (flush of the last
    batches, then EndTxn): the per-transaction cost that idempotent produce does not pay."""
    for first in range(0, records, RECORDS_PER_TXN):
        producer.begin_transaction()
        _send(producer, topic, payload, first, min(RECORDS_PER_TXN, records - first), partition)
        started = time.perf_counter()
        producer.commit_transaction(60)
        if commit_seconds is not None:
            commit_seconds.append(time.perf_counter() - started)


MODES = {
    "idempotent": (idempotent_producer, send_idempotent),
    "transactional": (transactional_producer, send_transactional),
}


def prepare_produce(
    mode: str, bootstrap: str | None, topic: str, records: int, payload: bytes, **send_args
) -> Callable[[], None]:
    """Set up a warmed-up producer now; return the job that sends ``records`` with it (the timed part)."""
    setup, send = MODES[mode]
    producer = setup(bootstrap, topic)
    return lambda: send(producer, topic, records, payload, **send_args)


def _producer_process(
    mode: str, bootstrap: str, topic: str, records: int, payload: bytes, partition: int, barrier
) -> None:
    """One concurrent producer, in its own process: set up and warm up, meet the others at
    ``barrier``, send."""
    setup, send = MODES[mode]
    producer = setup(bootstrap, topic, partition)
    barrier.wait(BARRIER_TIMEOUT_S)
    send(producer, topic, records, payload, partition=partition)


BARRIER_TIMEOUT_S = 120


def start_producer_processes(
    bootstrap: str, topic: str, records: int, payload: bytes, producers: int, mode: str
) -> Callable[[], None]:
    """Start ``producers`` processes, each sending ``records // producers`` records in ``mode``
    (a key of ``MODES``) to its own partition ``k`` of ``topic`` (``bootstrap`` MOCK: to a mock
    cluster in each process), and return once all of them have
    set up and warmed up their producer (process start-up, imports, init_transactions and the first
    acknowledged record are not measured). The returned function waits for them all and raises if
    any failed.

    Processes, not threads: four Python threads would share one GIL, and the idempotent ones, which
    never block, would lose more speed to it than the transactional ones, which wait for commits."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding librdkafka threads
    barrier = ctx.Barrier(producers + 1)
    processes = [
        ctx.Process(
            target=_producer_process,
            # With the mock cluster each process has a cluster of its own: partition 0 for all.
            args=(mode, bootstrap, topic, records // producers, payload, k if bootstrap else 0, barrier),
            daemon=True,
        )
        for k in range(producers)
    ]
    for process in processes:
        process.start()

    def failed() -> list[str]:
        return [f"producer {k}: exit code {p.exitcode}" for k, p in enumerate(processes) if p.exitcode]

    try:
        barrier.wait(BARRIER_TIMEOUT_S)
    except threading.BrokenBarrierError:
        for process in processes:
            process.kill()
            process.join()
        raise RuntimeError(f"concurrent producers did not all start: {failed() or 'timed out'}") from None

    def wait() -> None:
        for process in processes:
            process.join()
        if failed():
            raise RuntimeError(f"concurrent {mode} produce to {bootstrap}: {', '.join(failed())}")

    return wait


def prepare_consume(bootstrap: str, topic: str, records: int, isolation: str) -> Callable[[], None]:
    """A consumer connected to the broker (bootstrap and metadata done), and the timed job that reads
    ``records`` from partition 0 of ``topic`` with it: the phase lasts ~0.4 s, and the consumer's
    set-up, the same for both isolation levels, would otherwise be a noisy share of it."""
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
    consumer.list_topics(topic, timeout=30)

    def job() -> None:
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

    return job


def timed(samples: dict, key: str, broker, records: int, job, prepare=None) -> None:
    """Run ``job`` and record its rate; ``broker`` None (the mock cluster, inside this process)
    records no broker CPU. ``prepare``, if given, runs unmeasured first and returns the job."""
    if prepare is not None:
        job = prepare()
    with measure(broker.pid if broker is not None else os.getpid()) as m:
        job()
    r = m.result
    samples.setdefault(key, {"rate": [], "cpu": [], "idle": []})
    samples[key]["rate"].append(records / r.seconds)
    samples[key]["idle"].append(r.machine_idle_fraction)
    if broker is not None:
        samples[key]["cpu"].append(r.broker_cpu_s / (records * RECORD_BYTES / 1e9))
    progress(
        f"  {key:40s} {records / r.seconds:>10,.0f} rec/s"
        + (f"  broker {r.broker_cpu_s:6.2f} cpu-s" if broker is not None else "")
        + f"  ({r.seconds:.2f} s, machine {r.machine_idle_fraction:.0%} idle)"
    )


def run_round(
    brokers: dict, records: int, payload: bytes, samples: dict, round_no: int, producers: int
) -> None:
    """One round; the contenders' order flips every round (ABBA), so that a machine getting busier
    or quieter during the run does not favour whoever always goes first."""
    onceflow = brokers["onceflow"]
    b = onceflow.bootstrap
    commits = samples.setdefault("commit_s", {})
    txn_topic = create_topic(b)

    def single(key: str, broker, mode: str, topic: str | None = None, commits_of: str | None = None) -> None:
        """One warmed-up producer on partition 0 of ``topic`` (a fresh one, deleted after, if None)."""
        bootstrap = broker.bootstrap if broker is not None else MOCK
        fresh = topic is None
        topic = create_topic(bootstrap) if fresh else topic
        send_args = {"commit_seconds": commits.setdefault(commits_of, [])} if commits_of else {}
        timed(
            samples,
            key,
            broker,
            records,
            None,
            prepare=lambda: prepare_produce(mode, bootstrap, topic, records, payload, **send_args),
        )
        if fresh and bootstrap is not MOCK:
            delete_topic(bootstrap, topic)

    def idempotent() -> None:
        single("onceflow.produce_idempotent", onceflow, "idempotent")

    def transactional() -> None:
        # Into the topic the consumers read back below.
        single("onceflow.produce_transactional", onceflow, "transactional", txn_topic, "onceflow")

    def concurrent(mode: str, broker=onceflow, name: str = "onceflow") -> None:
        bootstrap = broker.bootstrap if broker is not None else MOCK
        topic = create_topic(bootstrap, producers)
        many = records * CONCURRENT_RECORDS_FACTOR
        timed(
            samples,
            f"{name}.produce_{mode}.{producers}_producers",
            broker,
            many,
            None,
            prepare=lambda: start_producer_processes(bootstrap, topic, many, payload, producers, mode),
        )
        if bootstrap is not MOCK:
            delete_topic(bootstrap, topic)

    def concurrent_idempotent() -> None:
        concurrent("idempotent")

    def concurrent_transactional() -> None:
        concurrent("transactional")

    def mock_concurrent() -> None:
        # The client's own reference for the concurrent ratio: the same processes, each with a broker
        # that costs nothing (its mock runs on the producers' share of the machine instead).
        for mode in ("idempotent", "transactional") if round_no % 2 else ("transactional", "idempotent"):
            concurrent(mode, None, "mock")

    def tansu_transactional() -> None:
        if "tansu" in brokers:
            single("tansu.produce_transactional", brokers["tansu"], "transactional", commits_of="tansu")

    def tansu_concurrent() -> None:
        # Another broker's reference for the concurrent phases (native, multi-threaded): how idle
        # the machine sits while the producers wait on their commits is the client's doing, not ours.
        if "tansu" in brokers:
            for mode in ("idempotent", "transactional") if round_no % 2 else ("transactional", "idempotent"):
                concurrent(mode, brokers["tansu"], "tansu")

    def mock_idempotent() -> None:
        single("mock.produce_idempotent", None, "idempotent")

    def mock_transactional() -> None:
        single("mock.produce_transactional", None, "transactional", commits_of="mock")

    order = [
        idempotent,
        transactional,
        concurrent_idempotent,
        concurrent_transactional,
        tansu_transactional,
        tansu_concurrent,
        mock_idempotent,
        mock_transactional,
        mock_concurrent,
    ]
    for job in order if round_no % 2 else reversed(order):
        job()
    consumes = [("read_uncommitted", "onceflow.consume_read_uncommitted")]
    consumes.append(("read_committed", "onceflow.consume_read_committed"))
    for repeat in range(CONSUME_REPEATS):  # each pair in ABBA order; every pair is one paired ratio
        for isolation, key in consumes if (round_no + repeat) % 2 else reversed(consumes):
            timed(
                samples,
                key,
                onceflow,
                records,
                None,
                prepare=lambda iso=isolation: prepare_consume(b, txn_topic, records, iso),
            )
    delete_topic(b, txn_topic)


def _paired(samples: dict, numerator: str, denominator: str) -> float:
    """Median over rounds of the ratio within each round (robust to a machine whose load drifts)."""
    pairs = zip(samples[numerator]["rate"], samples[denominator]["rate"], strict=False)
    return round(median([a / b for a, b in pairs]), 3)


def summarize(samples: dict, records: int, rounds: int, quick: bool, producers: int) -> dict:
    commit_s = samples.pop("commit_s", {})
    results = {key: round(median(s["rate"])) for key, s in samples.items()}
    cpu = {key: round(median(s["cpu"]), 2) for key, s in samples.items() if s["cpu"]}
    commit_ms = {
        broker: {
            "median": round(median(times) * 1e3, 2),
            "p90": round(sorted(times)[int(len(times) * 0.9)] * 1e3, 2),
        }
        for broker, times in commit_s.items()
        if times
    }
    many = f"{producers}_producers"
    pairs = {
        f"onceflow transactional/idempotent, {producers} producers": (
            f"onceflow.produce_transactional.{many}",
            f"onceflow.produce_idempotent.{many}",
        ),
        "onceflow transactional/idempotent, 1 producer": (
            "onceflow.produce_transactional",
            "onceflow.produce_idempotent",
        ),
        "mock transactional/idempotent, 1 producer": (
            "mock.produce_transactional",
            "mock.produce_idempotent",
        ),
        f"mock transactional/idempotent, {producers} producers": (
            f"mock.produce_transactional.{many}",
            f"mock.produce_idempotent.{many}",
        ),
        f"tansu transactional/idempotent, {producers} producers": (
            f"tansu.produce_transactional.{many}",
            f"tansu.produce_idempotent.{many}",
        ),
        "onceflow read_committed/read_uncommitted": (
            "onceflow.consume_read_committed",
            "onceflow.consume_read_uncommitted",
        ),
        "transactional produce onceflow/tansu": (
            "onceflow.produce_transactional",
            "tansu.produce_transactional",
        ),
    }
    pairs = {name: pair for name, pair in pairs.items() if pair[0] in results and pair[1] in results}
    ratios = {name: round(results[a] / results[b], 3) for name, (a, b) in pairs.items()}
    paired = {name: _paired(samples, a, b) for name, (a, b) in pairs.items()}
    return {
        "bench": "transactions",
        "unit": "records/s",
        "results": results,
        "ratios": ratios,
        "ratios_paired_by_round": paired,
        "cpu_s_per_gb": cpu,
        # The share of the machine's CPU time nobody used during the phase: where transactional produce
        # loses what it does not lose to CPU (every producer waiting on its commit at once).
        "machine_idle_fraction": {key: round(median(s["idle"]), 3) for key, s in samples.items()},
        "commit_transaction_ms": commit_ms,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "params": {
            "records": records,
            "records_concurrent": records * CONCURRENT_RECORDS_FACTOR,
            "record_bytes": RECORD_BYTES,
            "records_per_txn": RECORDS_PER_TXN,
            "rounds": rounds,
            "quick": quick,
            "concurrent_producers": producers,
            "onceflow_storage": "disk (temp dir)",
            "tansu_storage": "memory",
            "mock_storage": "memory, in the producer's process",
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
    parser.add_argument("--producers", type=int, default=4, help="producers in the concurrent runs")
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
            run_round(brokers, records, payload, samples, round_no, args.producers)
        result = summarize(samples, records, rounds, args.quick, args.producers)
    finally:
        for broker in brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
