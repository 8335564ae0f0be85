"""Warmed-up confluent-kafka producers in processes of their own, driven phase by phase.

``ProducerPool(bootstrap, size)`` starts ``size`` processes against one broker. Each makes one
idempotent and one transactional producer and warms both up (one acknowledged record; one committed
one-record transaction) before the pool reports ready, so that nothing a phase times is set-up:
librdkafka's idempotent producer sends nothing for its first ~0.5 s, and ``init_transactions`` takes
its own time, neither of which is a cost of transactions. The processes then live for the whole
run, so a phase costs its measured seconds and a little, not a process start.

``pool.run(phase, producers, on_start, on_end)`` makes the first ``producers`` processes send to
partition ``k`` of ``phase.topic`` for ``phase.seconds`` each, all starting together, and returns
what each did. Processes rather than threads: producer threads would share one GIL, and the
idempotent ones, which never block, would lose more to it than the transactional ones, which wait
for their commits.

Every producer has a bounded queue (``QUEUE_KBYTES``): once that much is unacknowledged,
``produce()`` refuses (BufferError) and the producer serves delivery reports until half the queue is
free (``wait_for_room``), so a producer sends at the rate the broker acknowledges and an idempotent
phase measures delivery, not enqueueing. A
transaction then holds what was delivered in its interval plus at most one queue, as with Kafka's
own producer and its ``buffer.memory``.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
import uuid
from dataclasses import dataclass

RECORD_BYTES = 1_000
# Unacknowledged bytes a producer may hold before produce() waits: a few batches in flight, so the
# broker stays busy, and about 50 ms of one producer's throughput on this machine, so a commit every
# 100 ms flushes what one interval sent rather than a backlog.
QUEUE_KBYTES = 4_096
PRODUCER_CONF = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1 << 20,
    # The broker's message.max.bytes default: librdkafka caps a batch at its own message.max.bytes
    # (1,000,000), which would cut full batches into a large and a tiny request.
    "message.max.bytes": 1_048_588,
    "compression.type": "none",
    "queue.buffering.max.kbytes": QUEUE_KBYTES,
}
READY_TIMEOUT_S = 120.0
PHASE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Phase:
    """What each producer of a phase does: ``mode`` "idempotent" or "transactional"; a transaction
    commits once ``commit_interval_ms`` has passed since it began, or after ``records_per_txn``."""

    topic: str
    mode: str
    seconds: float
    commit_interval_ms: int | None = None
    records_per_txn: int | None = None


@dataclass(frozen=True)
class ProducerResult:
    records: int  # acknowledged (idempotent) or committed (transactional)
    seconds: float  # from the start signal to the last acknowledgement or commit
    commit_seconds: tuple[float, ...]  # each commit_transaction() call


class ProducerPool:
    def __init__(
        self, bootstrap: str, size: int, warm_topic: str, payload: bytes, queue_kbytes: int = QUEUE_KBYTES
    ):
        ctx = multiprocessing.get_context("spawn")  # no fork of a process holding librdkafka threads
        self.bootstrap = bootstrap
        self._conns = []
        self._processes = []
        for k in range(size):
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=_serve, args=(child, bootstrap, k, warm_topic, payload, queue_kbytes), daemon=True
            )
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        for k in range(size):
            self._expect(k, "ready", READY_TIMEOUT_S)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def run(self, phase: Phase, producers: int, on_start=None, on_end=None) -> list[ProducerResult]:
        """Run ``phase`` on the first ``producers`` processes at once. ``on_start`` runs just before
        the start signal and ``on_end`` just after the last producer finished (the measured span)."""
        conns = range(producers)
        for k in conns:
            self._conns[k].send(("prepare", phase, k))
        for k in conns:
            self._expect(k, "prepared", PHASE_TIMEOUT_S)
        if on_start is not None:
            on_start()
        for k in conns:
            self._conns[k].send(("go",))
        results = [self._expect(k, "done", phase.seconds + PHASE_TIMEOUT_S)[1] for k in conns]
        if on_end is not None:
            on_end()
        return results

    def close(self) -> None:
        """Stop the processes (each flushes and closes its producers first)."""
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()

    def _expect(self, k: int, what: str, timeout: float):
        conn = self._conns[k]
        if not conn.poll(timeout):
            raise RuntimeError(f"producer {k} on {self.bootstrap}: no '{what}' within {timeout:.0f} s")
        message = conn.recv()
        if message[0] == "error":
            raise RuntimeError(f"producer {k} on {self.bootstrap} failed:\n{message[1]}")
        if message[0] != what:
            raise RuntimeError(f"producer {k} on {self.bootstrap}: {message[0]!r} instead of {what!r}")
        return message


# -- inside a pool process ---------------------------------------------------------------------------


def _serve(conn, bootstrap: str, k: int, warm_topic: str, payload: bytes, queue_kbytes: int) -> None:
    try:
        conf = {"bootstrap.servers": bootstrap, **PRODUCER_CONF, "queue.buffering.max.kbytes": queue_kbytes}
        producers = _warmed_up_producers(conf, k, warm_topic)
        conn.send(("ready",))
        while True:
            command = conn.recv()
            if command[0] == "stop":
                break
            _, phase, partition = command
            producer = producers[phase.mode]
            producer.list_topics(phase.topic, timeout=30)  # the new topic's metadata, untimed
            conn.send(("prepared",))
            conn.recv()  # go
            conn.send(("done", _send_phase(producer, phase, partition, payload)))
        for producer in producers.values():
            producer.flush(30)
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _warmed_up_producers(conf: dict, k: int, warm_topic: str) -> dict:
    from confluent_kafka import Producer

    idempotent = Producer({**conf, "enable.idempotence": True})
    idempotent.produce(warm_topic, b"warm-up", partition=k)
    if idempotent.flush(30):
        raise RuntimeError("the idempotent producer's warm-up record was not acknowledged")
    transactional = Producer({**conf, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}-{k}"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(warm_topic, b"warm-up", partition=k)
    transactional.commit_transaction(30)
    return {"idempotent": idempotent, "transactional": transactional}


def wait_for_room(producer) -> None:
    """The queue is full: serve delivery reports until half of it is free, as Kafka's producer blocks
    in ``send()`` until memory for a batch is free, rather than retrying one record at a time (a
    BufferError and a poll per record, CPU that a busy machine takes from the broker)."""
    full = len(producer)
    while len(producer) > full // 2:
        producer.poll(0.005)


def _send_phase(producer, phase: Phase, partition: int, payload: bytes) -> ProducerResult:
    """Send for ``phase.seconds``, committing on the phase's rule; end with a commit or flush."""
    transactional = phase.mode == "transactional"
    interval = phase.commit_interval_ms / 1e3 if phase.commit_interval_ms else None
    per_txn = phase.records_per_txn
    produce, poll, clock = producer.produce, producer.poll, time.perf_counter
    commits: list[float] = []
    topic, sent, in_txn = phase.topic, 0, 0
    started = clock()
    deadline = started + phase.seconds
    if transactional:
        producer.begin_transaction()
    txn_began = started
    while True:
        now = clock()
        if now >= deadline:
            break
        if transactional and (
            (interval is not None and now - txn_began >= interval)
            or (per_txn is not None and in_txn >= per_txn)
        ):
            producer.commit_transaction(60)
            commits.append(clock() - now)
            producer.begin_transaction()
            txn_began, in_txn = clock(), 0
        try:
            produce(topic, payload, key=b"%d" % sent, partition=partition)
        except BufferError:
            wait_for_room(producer)
            produce(topic, payload, key=b"%d" % sent, partition=partition)
        sent += 1
        in_txn += 1
        if sent % 1000 == 0:
            poll(0)
    if transactional:
        now = clock()
        producer.commit_transaction(60)
        commits.append(clock() - now)
    elif producer.flush(120):
        raise RuntimeError(f"idempotent produce to {topic}: records left undelivered")
    return ProducerResult(sent, clock() - started, tuple(commits))
