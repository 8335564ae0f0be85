"""Offset arithmetic for the source, pure: no Spark, no network.

Spark keeps a source's offsets in the query checkpoint as JSON; ours is Spark's Kafka format,
``{"topic": {"0": 23, "1": 42}}``, meaning "the next offset to read" per topic-partition. A
micro-batch covers ``[start, end)`` per partition; each non-empty range becomes one input partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onceflow.spark.options import EARLIEST, LATEST, OffsetSpec

__all__ = [
    "OffsetRange",
    "PartitionOffsets",
    "TopicPartition",
    "limit_end",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
    "resolve_spec",
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


def resolve_spec(
    spec: OffsetSpec,
    partitions: list[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    missing: int,
) -> PartitionOffsets:
    """Concrete offsets for ``partitions`` from a spec; a partition absent from a JSON spec takes
    ``missing`` (EARLIEST or LATEST). Offsets outside the log are clamped into it."""

    def concrete(tp: TopicPartition, wanted: int) -> int:
        if wanted == EARLIEST:
            return earliest[tp]
        if wanted == LATEST:
            return latest[tp]
        if wanted < 0:
            raise ValueError(f"offset {wanted} for {tp[0]}-{tp[1]}: use -2 (earliest) or -1 (latest)")
        return max(earliest[tp], min(wanted, latest[tp]))

    resolved: PartitionOffsets = {}
    for tp in partitions:
        if spec == "earliest":
            resolved[tp] = earliest[tp]
        elif spec == "latest":
            resolved[tp] = latest[tp]
        else:
            assert isinstance(spec, dict)
            resolved[tp] = concrete(tp, spec.get(tp[0], {}).get(tp[1], missing))
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
