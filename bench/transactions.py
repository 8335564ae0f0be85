"""Transaction overhead as Kafka measures it: producers that commit every 10, 100 or 1,000 ms,
against idempotent producers in the same run, on onceflow and on Tansu.

    python bench/transactions.py [--quick] [--seconds S] [--rounds R] [--producers 1,4]
                                 [--brokers onceflow,tansu] [--queue-kbytes K]

Kafka's own figure for what transactions cost is a throughput ratio: 1 KB records, a producer that
commits every 100 ms, against the same producer without transactions (about 3% overhead in Kafka's
design). This script measures that shape with confluent-kafka (librdkafka) producers, each in a
process of its own, warmed up before anything is timed, with a bounded queue so that a producer
sends at the rate the broker acknowledges and the idempotent phase measures delivery, not
enqueueing (``_producer_pool.py``):

- phases of S seconds (default 2; ``--quick`` 0.25) in which 1 and then 4 producers, each on its own
  partition of a fresh topic, send 1,000-byte records (acks=all, linger.ms=5, batch.size 1 MiB):
  idempotent; transactional committing every 10, 100 and 1,000 ms (a transaction commits once its
  interval has passed, so it lasts the interval plus its commit: "transaction_ms_as_run"); and
  transactional with 1,000 records per transaction, this benchmark's earlier shape, kept as a
  reference without a target (a transaction that short spends much of its time in the synchronous
  commit, whatever the broker);
- each transactional phase paired with an idempotent phase run just before or after it
  (alternately), so that a ratio compares neighbours on a machine whose load drifts; the same pairs
  against onceflow (disk, in a temp dir) and Tansu (memory), the whole order reversed every round,
  8 rounds (``--quick``: 2);
- a confluent-kafka consumer reading the 1-producer, 100 ms topic back from onceflow with
  read_uncommitted and read_committed, ``consume_repeats`` times each per round.

Reported (the last stdout line, one JSON object): records/s per phase (median over rounds); each
transactional phase's ratio to its idempotent neighbour, the median over the rounds (and, less
steady, the ratio of the medians); the broker's and the producers' CPU seconds per GB, and the ratio of their sum,
transactional over idempotent (on a shared machine CPU per GB moves far less than throughput);
the share of the machine left idle and the share other processes took (``others_cpu_fraction``:
read every figure with it); commit_transaction() latency, the mean transaction length as run, the
load average, and the targets: onceflow's 100 ms ratio >= 0.97, and onceflow's ratio no lower than
Tansu's at every interval.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    cpu_seconds,
    emit,
    kill_all,
    machine_cpu_seconds,
    median,
    progress,
    start_brokers,
)
from _producer_pool import PRODUCER_CONF, QUEUE_KBYTES, RECORD_BYTES, Phase, ProducerPool  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FULL = {"seconds": 2.0, "rounds": 8, "consume_repeats": 4}
QUICK = {"seconds": 0.25, "rounds": 2, "consume_repeats": 1}
PRODUCER_COUNTS = (1, 4)
COMMIT_INTERVALS_MS = (10, 100, 1_000)
REFERENCE_RECORDS_PER_TXN = 1_000
# The modes of a phase, in the order a round runs them: (name, mode, commit interval, records per txn).
MODES = (
    ("idempotent", "idempotent", None, None),
    *((f"transactional_{ms}ms", "transactional", ms, None) for ms in COMMIT_INTERVALS_MS),
    (f"transactional_{REFERENCE_RECORDS_PER_TXN}_records", "transactional", None, REFERENCE_RECORDS_PER_TXN),
)
TARGET_100MS_RATIO = 0.97
CONSUMED_PHASE = "onceflow.1_producer.transactional_100ms"


_admins: dict[str, AdminClient] = {}


def _admin(bootstrap: str) -> AdminClient:
    if bootstrap not in _admins:
        _admins[bootstrap] = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    return _admins[bootstrap]


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    _admin(bootstrap).create_topics([new])[topic].result(timeout=30)
    return topic


def delete_topic(bootstrap: str, topic: str) -> None:
    """Drop a measured topic at once, so that every phase writes into recycled page-cache pages
    (see ``_common.delete_topic``)."""
    _admin(bootstrap).delete_topics([topic])[topic].result(timeout=30)


def phase_key(broker: str, producers: int, mode_name: str) -> str:
    return f"{broker}.{producers}_producer{'s' if producers > 1 else ''}.{mode_name}"


@dataclass(frozen=True)
class PhaseCost:
    seconds: float
    broker_cpu_s: float
    producers_cpu_s: float  # the producer processes (the consumer's phases: this process)
    idle_fraction: float  # of the machine's CPU time over the phase, nobody's
    others_fraction: float  # of the machine's CPU time, taken by processes other than ours


class PhaseMeter:
    """Wall time and CPU over one phase: the broker's, the clients', and the share of the machine
    that went to other processes (a shared machine's other work, which moves every figure here and
    is reported beside them). On a saturated machine CPU per GB is much steadier than throughput."""

    def __init__(self, broker_pid: int, client_pids: list[int]) -> None:
        self.broker_pid, self.client_pids = broker_pid, client_pids
        self.cost: PhaseCost | None = None

    def _clients(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.client_pids)

    def start(self) -> None:
        self._start = (cpu_seconds(self.broker_pid), self._clients(), cpu_seconds(), machine_cpu_seconds())
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        seconds = time.perf_counter() - self._t0
        broker0, clients0, self0, (total0, idle0) = self._start
        total1, idle1 = machine_cpu_seconds()
        broker = cpu_seconds(self.broker_pid) - broker0
        clients = self._clients() - clients0
        ours = broker + clients + (cpu_seconds() - self0)
        total, idle = total1 - total0, idle1 - idle0
        self.cost = PhaseCost(
            seconds=seconds,
            broker_cpu_s=broker,
            producers_cpu_s=clients,
            idle_fraction=idle / total if total > 0 else 0.0,
            others_fraction=max(0.0, total - idle - ours) / total if total > 0 else 0.0,
        )


class Samples:
    """Per phase key, one entry per round: records/s, broker and client CPU s/GB, the machine's idle
    and others' shares; commit latencies and transaction lengths."""

    def __init__(self) -> None:
        self.rate: dict[str, list[float]] = {}
        self.broker_cpu: dict[str, list[float]] = {}
        self.client_cpu: dict[str, list[float]] = {}
        self.idle: dict[str, list[float]] = {}
        self.others: dict[str, list[float]] = {}
        self.commit_s: dict[str, list[float]] = {}
        self.txn_ms: dict[str, list[float]] = {}
        # Per transactional phase key: (its records/s, CPU s/GB) beside those of the idempotent phase
        # run right before or after it.
        self.pairs: dict[str, list[tuple[tuple[float, float], tuple[float, float]]]] = {}

    def last(self, key: str) -> tuple[float, float]:
        """The records/s and the (broker + producers) CPU s/GB of ``key``'s latest phase."""
        return self.rate[key][-1], self.broker_cpu[key][-1] + self.client_cpu[key][-1]

    def add(self, key: str, records: int, cost: PhaseCost, commits: list[float], producers: int) -> None:
        gigabytes = records * RECORD_BYTES / 1e9
        self.rate.setdefault(key, []).append(records / cost.seconds)
        self.broker_cpu.setdefault(key, []).append(cost.broker_cpu_s / gigabytes)
        self.client_cpu.setdefault(key, []).append(cost.producers_cpu_s / gigabytes)
        self.idle.setdefault(key, []).append(cost.idle_fraction)
        self.others.setdefault(key, []).append(cost.others_fraction)
        if commits:
            self.commit_s.setdefault(key, []).extend(commits)
            self.txn_ms.setdefault(key, []).append(cost.seconds * producers / len(commits) * 1e3)


def run_phase(samples: Samples, name: str, broker, pool: ProducerPool, producers: int, mode, seconds: float):
    """One phase on a fresh topic; returns the topic if it is the one read back, else deletes it."""
    mode_name, mode_kind, interval_ms, per_txn = mode
    key = phase_key(name, producers, mode_name)
    topic = create_topic(broker.bootstrap, producers)
    phase = Phase(topic, mode_kind, seconds, interval_ms, per_txn)
    meter = PhaseMeter(broker.pid, pool.pids[:producers])
    results = pool.run(phase, producers, on_start=meter.start, on_end=meter.stop)
    cost = meter.cost
    records = sum(r.records for r in results)
    commits = [c for r in results for c in r.commit_seconds]
    samples.add(key, records, cost, commits, producers)
    progress(
        f"  {key:48s} {records / cost.seconds:>9,.0f} rec/s  cpu-s broker {cost.broker_cpu_s:4.2f}"
        f" producers {cost.producers_cpu_s:4.2f}  ({cost.seconds:.2f} s, {len(commits)} commits,"
        f" machine {cost.idle_fraction:.0%} idle, others {cost.others_fraction:.0%})"
    )
    if key == CONSUMED_PHASE:
        return topic, records
    delete_topic(broker.bootstrap, topic)
    return None


def prepare_consume(bootstrap: str, topic: str, records: int, isolation: str):
    """A consumer connected to the broker (bootstrap and metadata done), and the timed job that reads
    ``records`` from partition 0 of ``topic``: its set-up, the same for both isolation levels, would
    otherwise be a noisy share of a short phase."""
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
                        raise RuntimeError(f"consume ({isolation}): stuck at {seen} of {records}")
                    continue
                seen += sum(1 for msg in batch if not msg.error())
        finally:
            consumer.close()

    return job


def run_consumes(samples: Samples, broker, topic: str, records: int, round_no: int, repeats: int) -> None:
    levels = ["read_uncommitted", "read_committed"]
    for repeat in range(repeats):  # each pair in ABBA order; every pair is one paired ratio
        for isolation in levels if (round_no + repeat) % 2 else reversed(levels):
            job = prepare_consume(broker.bootstrap, topic, records, isolation)
            meter = PhaseMeter(broker.pid, [])  # the consumer runs in this process
            meter.start()
            job()
            meter.stop()
            samples.add(f"onceflow.consume_{isolation}", records, meter.cost, [], 1)
            progress(f"  onceflow.consume_{isolation:40s} {records / meter.cost.seconds:>9,.0f} rec/s")
    delete_topic(broker.bootstrap, topic)


IDEMPOTENT = MODES[0]


def run_round(brokers: dict, pools: dict, samples: Samples, round_no: int, args) -> None:
    """Each transactional mode of each (producer count, broker) once, paired with an idempotent phase
    run just before or after it (alternately), so that every ratio compares two neighbouring phases;
    the whole order reverses every round."""
    order = [
        (producers, name, mode) for producers in args.producers for name in brokers for mode in MODES[1:]
    ]
    consumed = None
    for i, (producers, name, mode) in enumerate(order if round_no % 2 else reversed(order)):
        pair = (IDEMPOTENT, mode) if (round_no + i) % 2 else (mode, IDEMPOTENT)
        for phase_mode in pair:
            kept = run_phase(samples, name, brokers[name], pools[name], producers, phase_mode, args.seconds)
            consumed = consumed or kept
        key = phase_key(name, producers, mode[0])
        partner = samples.last(phase_key(name, producers, IDEMPOTENT[0]))
        samples.pairs.setdefault(key, []).append((samples.last(key), partner))
    if consumed is not None:  # onceflow ran with 1 producer
        run_consumes(samples, brokers["onceflow"], *consumed, round_no, args.consume_repeats)


def _paired(samples: Samples, numerator: str, denominator: str) -> float:
    """Median over rounds of the ratio within each round (the consume phases: adjacent pairs)."""
    pairs = zip(samples.rate[numerator], samples.rate[denominator], strict=False)
    return round(median([a / b for a, b in pairs]), 3)


def _paired_with_idempotent(samples: Samples, key: str) -> tuple[float, float]:
    """Medians over ``key``'s pairs of transactional/idempotent records/s, and of transactional/
    idempotent CPU per GB (broker + producers)."""
    pairs = samples.pairs[key]
    rate = median([txn[0] / idem[0] for txn, idem in pairs])
    cpu = median([txn[1] / idem[1] for txn, idem in pairs])
    return round(rate, 3), round(cpu, 3)


def summarize(samples: Samples, brokers: dict, args) -> dict:
    results = {key: round(median(rates)) for key, rates in samples.rate.items()}
    ratios, paired, cpu_ratios = {}, {}, {}
    for producers in args.producers:
        for name in brokers:
            idempotent = phase_key(name, producers, "idempotent")
            for mode_name, *_ in MODES[1:]:
                key = phase_key(name, producers, mode_name)
                if key in samples.pairs:
                    ratio_name = f"{key}/idempotent"
                    ratios[ratio_name] = round(results[key] / results[idempotent], 3)
                    paired[ratio_name], cpu_ratios[ratio_name] = _paired_with_idempotent(samples, key)
    read = ("onceflow.consume_read_committed", "onceflow.consume_read_uncommitted")
    if all(k in results for k in read):
        ratios["onceflow.read_committed/read_uncommitted"] = round(results[read[0]] / results[read[1]], 3)
        paired["onceflow.read_committed/read_uncommitted"] = _paired(samples, *read)
    return {
        "bench": "transactions",
        "unit": "records/s",
        "results": results,
        "ratios": ratios,
        "ratios_paired_by_round": paired,
        "targets": targets(paired, args.producers),
        "cpu_s_per_gb": {key: round(median(v), 2) for key, v in samples.broker_cpu.items()},
        # The producers' own CPU per GB (confluent-kafka processes; for the consume phases, the consumer).
        "client_cpu_s_per_gb": {key: round(median(v), 2) for key, v in samples.client_cpu.items()},
        # What a GB costs the broker and its producers together, transactional over idempotent (the
        # median over the pairs): the overhead in CPU, which a shared machine disturbs far less than
        # it disturbs throughput. Above 1: transactions cost more per GB.
        "cpu_per_gb_ratios_paired_by_round": cpu_ratios,
        "machine_idle_fraction": {key: round(median(v), 3) for key, v in samples.idle.items()},
        # The share of the machine's CPU that other processes took during the phases (median over the
        # run, and the busiest phase): other work on a shared machine, which moves every figure above.
        "others_cpu_fraction": {
            "median": round(median([x for v in samples.others.values() for x in v]), 3),
            "max": round(max(x for v in samples.others.values() for x in v), 3),
        },
        "commit_transaction_ms": {
            key: {
                "median": round(median(v) * 1e3, 2),
                "p90": round(sorted(v)[int(len(v) * 0.9)] * 1e3, 2),
            }
            for key, v in samples.commit_s.items()
        },
        "transaction_ms_as_run": {key: round(median(v), 1) for key, v in samples.txn_ms.items()},
        "load_average_1m": {"start": args.load_at_start, "end": round(os.getloadavg()[0], 2)},
        "params": {
            "seconds_per_phase": args.seconds,
            "rounds": args.rounds,
            "quick": args.quick,
            "producers": list(args.producers),
            "commit_intervals_ms": list(COMMIT_INTERVALS_MS),
            "reference_records_per_txn": REFERENCE_RECORDS_PER_TXN,
            "record_bytes": RECORD_BYTES,
            "producer_queue_kbytes": args.queue_kbytes,
            "linger_ms": PRODUCER_CONF["linger.ms"],
            "batch_size": PRODUCER_CONF["batch.size"],
            "consume_repeats": args.consume_repeats,
            "onceflow_storage": "disk (temp dir)",
            "tansu_storage": "memory",
            "cpus": os.cpu_count(),
        },
    }


def targets(paired: dict, producer_counts) -> dict:
    """Each target by name: its figure(s) and whether it is met (paired ratios)."""
    out = {}
    for producers in producer_counts:
        key = f"{phase_key('onceflow', producers, 'transactional_100ms')}/idempotent"
        if key in paired:
            out[f"{key} >= {TARGET_100MS_RATIO}"] = {
                "value": paired[key],
                "met": paired[key] >= TARGET_100MS_RATIO,
            }
        for ms in COMMIT_INTERVALS_MS:
            ours = f"{phase_key('onceflow', producers, f'transactional_{ms}ms')}/idempotent"
            theirs = f"{phase_key('tansu', producers, f'transactional_{ms}ms')}/idempotent"
            if ours in paired and theirs in paired:
                out[f"{ours} >= tansu's"] = {
                    "value": paired[ours],
                    "tansu": paired[theirs],
                    "met": paired[ours] >= paired[theirs],
                }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run, under 60 s")
    parser.add_argument("--seconds", type=float, help="seconds per phase")
    parser.add_argument("--rounds", type=int, help="rounds")
    parser.add_argument(
        "--queue-kbytes", type=int, default=QUEUE_KBYTES, help="each producer's queue.buffering.max.kbytes"
    )
    parser.add_argument("--brokers", default="onceflow,tansu", help="which brokers run the phases")
    parser.add_argument("--producers", default=",".join(map(str, PRODUCER_COUNTS)), help="e.g. 1,4")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    args.seconds = args.seconds or preset["seconds"]
    args.rounds = args.rounds or preset["rounds"]
    args.consume_repeats = preset["consume_repeats"]
    args.producers = tuple(int(p) for p in args.producers.split(","))
    args.load_at_start = round(os.getloadavg()[0], 2)
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]
    started = time.perf_counter()
    started_brokers, tmp = start_brokers()
    brokers = {name: b for name, b in started_brokers.items() if name in args.brokers.split(",")}
    pools: dict[str, ProducerPool] = {}
    try:
        for name, broker in brokers.items():
            warm_topic = create_topic(broker.bootstrap, max(args.producers))
            pools[name] = ProducerPool(
                broker.bootstrap, max(args.producers), warm_topic, payload, args.queue_kbytes
            )
        progress(f"producers ready after {time.perf_counter() - started:.1f} s")
        samples = Samples()
        for round_no in range(1, args.rounds + 1):
            progress(
                f"round {round_no}/{args.rounds}: phases of {args.seconds} s, records of {RECORD_BYTES} bytes"
            )
            run_round(brokers, pools, samples, round_no, args)
        result = summarize(samples, brokers, args)
    finally:
        for pool in pools.values():
            pool.close()
        _admins.clear()  # before the brokers go: an admin client left open retries its connection
        for broker in started_brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()
    progress(f"done in {time.perf_counter() - started:.0f} s")
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
