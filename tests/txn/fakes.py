"""In-memory stand-ins for the coordinator's writers, a settable clock and a counting id source."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from onceflow.broker.coordinator.records import StoredBatch
from onceflow.broker.txn import TransactionConfig, TransactionCoordinator, TxnMarker
from onceflow.broker.txn.log_format import decode_key, decode_value
from onceflow.protocol.errors import KafkaError


def run(coro):
    return asyncio.run(coro)


@dataclass
class FakeClock:
    now: int = 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class FakeTxnLog:
    """``__transaction_state`` as a list of (partition, key, value), behind the runtime's
    ``PartitionWriter``; ``fail_with`` makes the next append raise. Appends commit on the next turn of
    the event loop (as a replicated partition's high watermark would move later), so answers really
    wait for the commit."""

    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    fail_with: KafkaError | None = None
    num_partitions: int = 50
    _uncommitted: dict[int, int] = field(default_factory=dict)  # appends whose commit is to come
    _listener: object = None

    def append(self, partition: int, batch: StoredBatch) -> int:
        if self.fail_with is not None:
            exc, self.fail_with = self.fail_with, None
            raise exc
        for key, value in batch.records:
            self.records.append((partition, key, value))
        self._uncommitted[partition] = self._uncommitted.get(partition, 0) + len(batch.records)
        try:
            asyncio.get_running_loop().call_soon(self._commit, partition, len(batch.records))
        except RuntimeError:
            self._commit(partition, len(batch.records))
        return self.log_end_offset(partition)

    def _commit(self, partition: int, count: int) -> None:
        self._uncommitted[partition] -= count
        if self._listener is not None:
            self._listener(partition, self.high_watermark(partition))

    def read(self, partition: int):
        return [StoredBatch(((k, v),)) for p, k, v in self.records if p == partition]

    def log_end_offset(self, partition: int) -> int:
        return sum(1 for p, _, _ in self.records if p == partition)

    def high_watermark(self, partition: int) -> int:
        # Records put in ``records`` directly (a test's own) count as committed.
        return self.log_end_offset(partition) - self._uncommitted.get(partition, 0)

    def set_high_watermark_listener(self, listener) -> None:
        self._listener = listener

    def key_values(self) -> list[tuple[bytes, bytes | None]]:
        return [(k, v) for _, k, v in self.records]

    def states_of(self, transactional_id: str) -> list[str]:
        """The state names appended for one id, in order ('<tombstone>' for a delete)."""
        from onceflow.broker.txn import TransactionState

        out = []
        for _, key, value in self.records:
            if decode_key(key) != transactional_id:
                continue
            decoded = decode_value(value)
            out.append(
                "<tombstone>"
                if decoded is None
                else TransactionState.from_id(decoded.transaction_status).kafka_name
            )
        return out


@dataclass
class FakeMarkers:
    written: list[TxnMarker] = field(default_factory=list)
    fail_with: Exception | None = None  # stays set until cleared: a broker that cannot write

    async def write_markers(self, marker: TxnMarker) -> None:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append(marker)


class CountingIds:
    def __init__(self, start: int = 1000) -> None:
        self.next = start

    def generate_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


@dataclass
class Rig:
    coordinator: TransactionCoordinator
    log: FakeTxnLog
    markers: FakeMarkers
    clock: FakeClock
    ids: CountingIds


def make_rig(
    *,
    log: FakeTxnLog | None = None,
    config: TransactionConfig | None = None,
    load: bool = True,
    ids_start: int = 1000,
    complete_in_background: bool = False,
) -> Rig:
    log = log or FakeTxnLog()
    log.num_partitions = (config or TransactionConfig()).transaction_state_log_num_partitions
    markers = FakeMarkers()
    clock = FakeClock()
    ids = CountingIds(ids_start)
    coordinator = TransactionCoordinator(
        log_writer=log,
        marker_writer=markers,
        producer_ids=ids,
        config=config,
        clock_ms=clock,
        complete_in_background=complete_in_background,
    )
    if load:
        coordinator.begin_loading(coordinator_epoch=0)
        coordinator.load_from_records(log.key_values())
    return Rig(coordinator, log, markers, clock, ids)
