"""In-memory stand-ins for the coordinator's writers, a settable clock and a counting id source."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

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
    """``__transaction_state`` as a list; ``fail_with`` makes the next append raise."""

    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    fail_with: KafkaError | None = None

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        await asyncio.sleep(0)  # let other tasks interleave, as a real append would
        if self.fail_with is not None:
            exc, self.fail_with = self.fail_with, None
            raise exc
        self.records.append((partition, key, value))

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
