"""Offset arithmetic for the source, pure: no Spark, no network.

Spark keeps a source's offsets in the query checkpoint as JSON; ours is Spark's Kafka format,
``{"topic": {"0": 23, "1": 42}}``, meaning "the next offset to read" per topic-partition. A
micro-batch covers ``[start, end)`` per partition; each non-empty range becomes one input partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceflow.spark.options import EARLIEST, LATEST, TIMESTAMP_STRATEGY_LATEST, OffsetSpec, TimestampSpec

__all__ = [
    "OffsetRange",
    "PartitionOffsets",
    "TopicPartition",
    "limit_end",
    "offsets_at_timestamps",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
    "resolve_spec",
    "split_ranges",
    "timestamps_for",
]

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition; ``from_offset`` may be EARLIEST
    for a partition that appeared after the batch's start offsets were fixed."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def _check_names_every_partition(
    given: set[TopicPartition], partitions: list[TopicPartition], option: str, what: str, hint: str = ""
) -> None:
    """A JSON spec must name exactly the partitions read, as in Spark's Kafka source: a partition left
    out would otherwise be read from somewhere the user did not say (or not at all)."""
    missing = sorted(set(partitions) - given)
    extra = sorted(given - set(partitions))
    if not missing and not extra:
        return
    problems = []
    if missing:
        problems.append(f"no {what} for " + ", ".join(f"{t}-{p}" for t, p in missing))
    if extra:
        problems.append(f"a {what} for " + ", ".join(f"{t}-{p}" for t, p in extra) + ", which is not read")
    raise ValueError(f"option {option}: {'; '.join(problems)}. Give one for every partition read{hint}.")


def resolve_spec(
    spec: OffsetSpec,
    partitions: list[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    option: str,
) -> PartitionOffsets:
    """Concrete offsets for ``partitions`` from a spec: ``earliest``, ``latest``, or Spark's JSON,
    which must name exactly the partitions read (-2 meaning earliest, -1 latest). Offsets are taken as
    given: one outside the log is the caller's to judge (``failOnDataLoss``)."""
    if spec == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec == "latest":
        return {tp: latest[tp] for tp in partitions}
    assert isinstance(spec, dict)
    given = {(topic, p) for topic, parts in spec.items() for p in parts}
    _check_names_every_partition(given, partitions, option, "offset", " (-2 for earliest, -1 for latest)")
    resolved: PartitionOffsets = {}
    for tp in partitions:
        wanted = spec[tp[0]][tp[1]]
        resolved[tp] = earliest[tp] if wanted == EARLIEST else latest[tp] if wanted == LATEST else wanted
    return resolved


def limit_end(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> PartitionOffsets:
    """End offsets that admit at most ``max_offsets`` offsets in total, shared in proportion to what
    each partition has waiting (largest remainders get the leftover units), so that no partition
    starves. The caller gives every partition of ``latest`` a start (new ones: their earliest)."""
    backlog = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: max_offsets * waiting / total for tp, waiting in backlog.items()}
    granted = {tp: int(share) for tp, share in shares.items()}
    leftover = max_offsets - sum(granted.values())
    by_remainder = sorted(shares, key=lambda tp: (granted[tp] - shares[tp], tp))
    for tp in by_remainder[:leftover]:
        granted[tp] += 1
    return {tp: start.get(tp, end) + granted[tp] for tp, end in latest.items()}


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """One range per partition with something to read; a partition new in ``end`` reads from its
    earliest offset (as Spark's Kafka source does for partitions discovered mid-query)."""
    ranges = []
    for (topic, partition), until in sorted(end.items()):
        begin = start.get((topic, partition), EARLIEST)
        if begin == EARLIEST or begin < until:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return ranges


def timestamps_for(spec: TimestampSpec, partitions: list[TopicPartition], option: str) -> PartitionOffsets:
    """The timestamp to look up per partition: one for all, or the JSON spec's, which must name exactly
    the partitions read (as Spark's Kafka source requires)."""
    if isinstance(spec, int):
        return {tp: spec for tp in partitions}
    given = {(topic, p) for topic, parts in spec.items() for p in parts}
    _check_names_every_partition(given, partitions, option, "timestamp")
    return {tp: spec[tp[0]][tp[1]] for tp in partitions}


def offsets_at_timestamps(
    found: Mapping[TopicPartition, int],
    timestamps: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    strategy: str,
    option: str,
) -> PartitionOffsets:
    """Offsets from ListOffsets-by-timestamp answers (``found``; -1: no record at or after the
    timestamp). Such a partition takes its latest offset under the ``latest`` strategy (always, for an
    end), else the read fails, as Spark's does."""
    resolved: PartitionOffsets = {}
    for tp, offset in found.items():
        if offset >= 0:
            resolved[tp] = offset
        elif strategy == TIMESTAMP_STRATEGY_LATEST:
            resolved[tp] = latest[tp]
        else:
            raise ValueError(
                f"option {option}: partition {tp[0]}-{tp[1]} has no record at or after timestamp "
                f"{timestamps[tp]}; set startingOffsetsByTimestampStrategy=latest to start such a "
                "partition at its latest offset"
            )
    return resolved


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges (Spark's ``minPartitions``), none of more than
    ``max_records`` offsets (``maxRecordsPerPartition``). When there are fewer ranges than
    ``min_partitions``, each is cut into parts in proportion to its share of all the offsets (at least
    one; rounded), of equal size; then a range still above ``max_records`` is cut into equal parts of at
    most that. The cut depends only on the ranges and the numbers, so a replayed batch is cut the same
    way (the exactly-once sink relies on that). A range from EARLIEST (its size unknown) is not cut."""
    if min_partitions is not None and len(ranges) < min_partitions:
        ranges = _split_in_proportion(ranges, min_partitions)
    if max_records is None:
        return ranges
    result = []
    for r in ranges:
        size = r.until_offset - r.from_offset if r.from_offset != EARLIEST else 0
        parts = -(-size // max_records) if size > max_records else 1
        result.extend(_cut(r, parts))
    return result


def _split_in_proportion(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    sizes = [r.until_offset - r.from_offset if r.from_offset != EARLIEST else 0 for r in ranges]
    total = sum(sizes)
    if total <= 0:
        return ranges
    result = []
    for r, size in zip(ranges, sizes, strict=True):
        parts = min(size, max(1, round(size / total * min_partitions))) if size > 0 else 1
        result.extend(_cut(r, parts))
    return result


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1:
        return [r]
    size = r.until_offset - r.from_offset
    bounds = [r.from_offset + size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
